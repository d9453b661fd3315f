import Foundation
import HeraldDomain
import HeraldStorage
import Hummingbird
import Logging

/// The tutorial's send endpoint, `POST /api/notifications?pns=…&to_tag=<user>` with a JSON
/// string body, behind device sign-in: sends `From <caller>: <text>` to `to_tag`'s devices in
/// the format `pns` names. Answers 200 `{"id": …}` once the notification and its job are
/// committed (the tutorial backend waited for the hub instead). Rate-limited per user.
struct TutorialSendController: Sendable {
    /// The longest message, in characters (the OpenAPI `TutorialMessage.maxLength`).
    static let maxMessageLength = 1000

    let store: NotificationStore
    let limiter: RateLimiter
    let perUserRate: Int
    let maxBodyBytes: Int

    func send(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        let owner = try context.requireIdentity()
        if let wait = limiter.acquire("user:\(owner.id)", rate: perUserRate) {
            throw APIError.rateLimited(retryAfter: wait, "this user's sending")
        }
        let query = request.uri.queryParameters
        guard let pns = query.get("pns") else {
            throw APIError(.badRequest, code: .unknownPNS, message: "pns is required: apns, fcm (or fcmv1, gcm) or wns")
        }
        let format = try NotificationFormat(tutorialPNS: pns)
        guard let recipient = query.get("to_tag"), !recipient.isEmpty else {
            throw APIError(.badRequest, code: .invalidToTag, message: "to_tag (the recipient's user name) is required")
        }
        let target: NotificationTarget
        do {
            target = try NotificationTarget.user(recipient).validated()
        } catch {
            throw APIError(.badRequest, code: .invalidToTag, message: "to_tag: \(error.message)")
        }
        let body = try await request.collectBody(limit: maxBodyBytes)
        guard case .string(let message)? = JSONValue.parse(body) else {
            throw APIError.invalidJSON("the request body must be a JSON string, such as \"Hello\"")
        }
        guard !message.isEmpty else {
            throw APIError(.badRequest, code: .invalidMessage, message: "the message is empty")
        }
        guard message.count <= Self.maxMessageLength else {
            throw APIError(
                .badRequest, code: .messageTooLong,
                message: "the message has \(message.count) characters; at most \(Self.maxMessageLength)")
        }
        let payload = try TutorialMessage.payload(format, from: owner.name, message)
        let content = NotificationContent(
            apple: format == .apple ? payload : nil, fcmv1: format == .fcmv1 ? payload : nil,
            windows: format == .windows ? payload : nil)
        let checked = try NotificationRequest(target: target, content: content).validated(now: Date())
        guard let answer = try await store.create([NewNotification(request: checked)], sender: .user(owner.id)).first else {
            throw APIError.internalError
        }
        context.logger.debug(
            "herald.notification.tutorial_accepted",
            metadata: ["notification.id": "\(answer.id)", "user": "\(owner.name)", "format": "\(format.rawValue)"])
        return try JSONWriter.response(TutorialSendAnswer(id: answer.id.uuidString.lowercased()))
    }
}

/// The tutorial send's answer (the OpenAPI `TutorialSendAnswer`): `{"id": "…"}`.
struct TutorialSendAnswer: Encodable {
    var id: String
}

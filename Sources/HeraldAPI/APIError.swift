import Foundation
public import HeraldDomain
import HeraldStorage
public import Hummingbird
import NIOCore

/// An error answered to an HTTP client: a status, a stable `code` and a sentence, sent as
/// `{"code": "...", "message": "..."}`. It never carries secrets or internal details.
public struct APIError: Error, Sendable, HTTPResponseError, CustomStringConvertible {
    /// A short, stable code: the HTTP layer's own (the static members below, so a misspelt
    /// code does not compile), or a ``DomainError/Code`` carried through unchanged. The two
    /// catalogues are disjoint; `openapi.yaml`'s `Error.code` lists both.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case own(Own)
            case domain(DomainError.Code)
        }

        private enum Own: String, Sendable, CaseIterable {
            case badRequest = "bad_request"
            case bodyTooLarge = "body_too_large"
            case forbidden
            case internalError = "internal_error"
            case invalidBatch = "invalid_batch"
            case invalidJSON = "invalid_json"
            case invalidMessage = "invalid_message"
            case invalidQuery = "invalid_query"
            case invalidToTag = "invalid_to_tag"
            case laneBacklogged = "lane_backlogged"
            case messageTooLong = "message_too_long"
            case methodNotAllowed = "method_not_allowed"
            case overloaded
            case rateLimited = "rate_limited"
            case tooManyHubSends = "too_many_hub_sends"
            case unauthorized
            case unavailable
            case userNotFound = "user_not_found"
        }

        private let base: Base
        private init(_ own: Own) { base = .own(own) }

        /// A request the server could not read in a way no more specific code names (a malformed header).
        public static let badRequest = Code(.badRequest)
        /// The request body is larger than the route accepts (HTTP 413).
        public static let bodyTooLarge = Code(.bodyTooLarge)
        /// The API key lacks the scope the route needs (HTTP 403).
        public static let forbidden = Code(.forbidden)
        /// Something unexpected; the details are in the server's log only (HTTP 500).
        public static let internalError = Code(.internalError)
        /// A batch's `notifications` list is empty or too long.
        public static let invalidBatch = Code(.invalidBatch)
        /// The body is not the JSON the route takes (for the device API, also a field of it).
        public static let invalidJSON = Code(.invalidJSON)
        /// A tutorial send's message is empty.
        public static let invalidMessage = Code(.invalidMessage)
        /// A query parameter is malformed.
        public static let invalidQuery = Code(.invalidQuery)
        /// A tutorial send's `to_tag` is missing or malformed.
        public static let invalidToTag = Code(.invalidToTag)
        /// The send's lane is further behind than its bound (HTTP 429, with `Retry-After`).
        public static let laneBacklogged = Code(.laneBacklogged)
        /// A tutorial send's message is longer than allowed.
        public static let messageTooLong = Code(.messageTooLong)
        /// The route does not take this method (HTTP 405, with `Allow`).
        public static let methodNotAllowed = Code(.methodNotAllowed)
        /// Too many sign-ins are waiting for a password check (HTTP 503, with `Retry-After`).
        public static let overloaded = Code(.overloaded)
        /// A rate limit was reached (HTTP 429, with `Retry-After`).
        public static let rateLimited = Code(.rateLimited)
        /// A notification, or a request, would fan out into more hub sends than allowed.
        public static let tooManyHubSends = Code(.tooManyHubSends)
        /// No valid credentials (HTTP 401).
        public static let unauthorized = Code(.unauthorized)
        /// The database cannot be reached (HTTP 503, with `Retry-After`).
        public static let unavailable = Code(.unavailable)
        /// The device user named does not exist (HTTP 404).
        public static let userNotFound = Code(.userNotFound)

        /// A domain error's code, as the client sees it.
        public init(_ code: DomainError.Code) { base = .domain(code) }

        /// Every code of the HTTP layer (not the domain's: ``DomainError/Code/all``).
        public static var all: [Code] { Own.allCases.map(Code.init) }

        /// The code as sent, e.g. `rate_limited`.
        public var rawValue: String {
            switch base {
            case .own(let own): own.rawValue
            case .domain(let code): code.rawValue
            }
        }

        /// ``rawValue``.
        public var description: String { rawValue }
    }

    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// A short, stable code, e.g. ``Code/unauthorized``, ``Code/invalidJSON``.
    public var code: Code
    /// What is wrong, for a person.
    public var message: String
    /// Extra response headers (`WWW-Authenticate`, `Retry-After`, `Allow`).
    public var headers: HTTPFields

    /// Creates an error with one of the HTTP layer's codes.
    public init(_ status: HTTPResponse.Status, code: Code, message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    /// Creates an error with a domain code (the route refuses what the domain would, before
    /// reaching it).
    public init(_ status: HTTPResponse.Status, code: DomainError.Code, message: String, headers: HTTPFields = [:]) {
        self.init(status, code: Code(code), message: message, headers: headers)
    }

    /// `status code: message`.
    public var description: String { "\(status.code) \(code): \(message)" }

    /// The JSON response.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        response()
    }

    /// The JSON response, without a request.
    func response() -> Response {
        var headers = self.headers
        headers[.contentType] = JSONWriter.contentType
        let data =
            (try? JSONWriter.data(ErrorBody(code: code.rawValue, message: message)))
            ?? Data(#"{"code":"internal_error","message":"error"}"#.utf8)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    // MARK: Common errors

    /// 400: the body is not the JSON this route takes.
    static func invalidJSON(_ message: String) -> APIError {
        APIError(.badRequest, code: .invalidJSON, message: message)
    }

    /// 413: the body is larger than `limit` bytes.
    static func bodyTooLarge(limit: Int) -> APIError {
        APIError(.contentTooLarge, code: .bodyTooLarge, message: "the request body must be at most \(limit) bytes")
    }

    /// 503: too many sign-ins are waiting for a password check.
    static let overloaded = APIError(
        .serviceUnavailable, code: .overloaded, message: "too many sign-ins are being checked; retry in a moment",
        headers: [.retryAfter: "1"])

    /// 503: the database cannot be reached.
    static let unavailable = APIError(
        .serviceUnavailable, code: .unavailable, message: "the service is temporarily unavailable; retry in a moment",
        headers: [.retryAfter: "1"])

    /// 500: something unexpected; details are in the server's log only.
    static let internalError = APIError(
        .internalServerError, code: .internalError, message: "the server could not handle the request; it was logged")

    /// 405 with the methods the route takes.
    static func methodNotAllowed(allow: String) -> APIError {
        APIError(
            .methodNotAllowed, code: .methodNotAllowed, message: "this route takes \(allow)",
            headers: [.allow: allow])
    }

    /// The status a `DomainError` maps to.
    static func status(for kind: DomainError.Kind) -> HTTPResponse.Status {
        switch kind {
        case .invalid: .badRequest
        case .conflict: .conflict
        case .gone: .gone
        case .notFound: .notFound
        case .overLimit: .unprocessableContent
        }
    }
}

/// The JSON shape of every error response.
struct ErrorBody: Codable {
    var code: String
    var message: String
}

/// Turns every error into a JSON error response: `APIError` as it is, `DomainError` by its
/// kind (400, 409, 410, 404, 422), `StorageError.unavailable` as 503, Hummingbird's own errors
/// (404 for unknown routes, 413) with a JSON body, and anything else as a generic 500 whose
/// details go to the log only.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch {
            return Self.map(error, context: context).response()
        }
    }

    static func map(_ error: any Error, context: Context) -> APIError {
        switch error {
        case let error as APIError:
            return error
        case let error as DomainError:
            return APIError(APIError.status(for: error.kind), code: error.code, message: error.message)
        case let error as StorageError where error.code == .unavailable:
            context.logger.warning(
                "herald.api.database_unavailable", metadata: ["error": "\(String(reflecting: error))"])
            return .unavailable
        case is NIOTooManyBytesError:
            return APIError(.contentTooLarge, code: .bodyTooLarge, message: "the request body is too large")
        case let error as HTTPError:
            return fromStatus(error.status, headers: error.headers)
        case let error as any HTTPResponseError where error.status.code < 500:
            return fromStatus(error.status, headers: [:])
        default:
            context.logger.error("herald.api.unexpected_error", metadata: ["error": "\(String(reflecting: error))"])
            return .internalError
        }
    }

    /// A JSON error for a status Hummingbird chose (its messages are not written for clients).
    static func fromStatus(_ status: HTTPResponse.Status, headers: HTTPFields) -> APIError {
        switch status {
        case .notFound:
            return APIError(.notFound, code: .notFound, message: "no such route", headers: headers)
        case .methodNotAllowed:
            return APIError(
                .methodNotAllowed, code: .methodNotAllowed, message: "method not allowed", headers: headers)
        case .contentTooLarge:
            return APIError(.contentTooLarge, code: .bodyTooLarge, message: "the request body is too large")
        case .unauthorized:
            return APIError(.unauthorized, code: .unauthorized, message: "sign in first", headers: headers)
        case let status where status.code >= 500:
            return .internalError
        default:
            return APIError(status, code: .badRequest, message: "the request could not be handled", headers: headers)
        }
    }
}

/// `HTTPTypes.HTTPField`, reached through the `HTTPFields` that Hummingbird re-exports.
typealias HTTPField = HTTPFields.Element

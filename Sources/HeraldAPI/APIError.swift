import Foundation
import HeraldDomain
import HeraldStorage
public import Hummingbird
import NIOCore

/// An error answered to an HTTP client: a status, a stable `code` and a sentence, sent as
/// `{"code": "...", "message": "..."}`. It never carries secrets or internal details.
public struct APIError: Error, Sendable, HTTPResponseError, CustomStringConvertible {
    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// A short, stable code, e.g. `unauthorized`, `invalid_json`.
    public var code: String
    /// What is wrong, for a person.
    public var message: String
    /// Extra response headers (`WWW-Authenticate`, `Retry-After`, `Allow`).
    public var headers: HTTPFields

    /// Creates an error.
    public init(_ status: HTTPResponse.Status, code: String, message: String, headers: HTTPFields = [:]) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
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
            (try? JSONWriter.data(ErrorBody(code: code, message: message)))
            ?? Data(#"{"code":"internal_error","message":"error"}"#.utf8)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    // MARK: Common errors

    /// 400: the body is not the JSON this route takes.
    static func invalidJSON(_ message: String) -> APIError {
        APIError(.badRequest, code: "invalid_json", message: message)
    }

    /// 413: the body is larger than `limit` bytes.
    static func bodyTooLarge(limit: Int) -> APIError {
        APIError(.contentTooLarge, code: "body_too_large", message: "the request body must be at most \(limit) bytes")
    }

    /// 503: too many sign-ins are waiting for a password check.
    static let overloaded = APIError(
        .serviceUnavailable, code: "overloaded", message: "too many sign-ins are being checked; retry in a moment",
        headers: [.retryAfter: "1"])

    /// 503: the database cannot be reached.
    static let unavailable = APIError(
        .serviceUnavailable, code: "unavailable", message: "the service is temporarily unavailable; retry in a moment",
        headers: [.retryAfter: "1"])

    /// 500: something unexpected; details are in the server's log only.
    static let internalError = APIError(
        .internalServerError, code: "internal_error", message: "the server could not handle the request; it was logged")

    /// 405 with the methods the route takes.
    static func methodNotAllowed(allow: String) -> APIError {
        APIError(
            .methodNotAllowed, code: "method_not_allowed", message: "this route takes \(allow)",
            headers: [.allow: allow])
    }

    /// The status a `DomainError` maps to.
    static func status(for kind: DomainError.Kind) -> HTTPResponse.Status {
        switch kind {
        case .invalid: .badRequest
        case .conflict: .conflict
        case .gone: .gone
        case .notFound: .notFound
        }
    }
}

/// The JSON shape of every error response.
struct ErrorBody: Codable {
    var code: String
    var message: String
}

/// Turns every error into a JSON error response: `APIError` as it is, `DomainError` by its
/// kind (400, 409, 410, 404), `StorageError.unavailable` as 503, Hummingbird's own errors
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
            return APIError(.contentTooLarge, code: "body_too_large", message: "the request body is too large")
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
            return APIError(.notFound, code: "not_found", message: "no such route", headers: headers)
        case .methodNotAllowed:
            return APIError(
                .methodNotAllowed, code: "method_not_allowed", message: "method not allowed", headers: headers)
        case .contentTooLarge:
            return APIError(.contentTooLarge, code: "body_too_large", message: "the request body is too large")
        case .unauthorized:
            return APIError(.unauthorized, code: "unauthorized", message: "sign in first", headers: headers)
        case let status where status.code >= 500:
            return .internalError
        default:
            return APIError(status, code: "bad_request", message: "the request could not be handled", headers: headers)
        }
    }
}

/// `HTTPTypes.HTTPField`, reached through the `HTTPFields` that Hummingbird re-exports.
typealias HTTPField = HTTPFields.Element

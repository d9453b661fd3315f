import Crypto
import Foundation
import HeraldDomain
import Hummingbird
import NIOCore

/// Serves the ops dashboard: `GET /dashboard` (the page, `index.html`) and
/// `GET /dashboard/{asset}` (its styles and scripts), from the files of
/// `Sources/HeraldAPI/Dashboard/` that the `EmbedFiles` build plugin compiled into the binary
/// (`embeddedDashboardFiles`). Nothing is read from disk and nothing is fetched from elsewhere.
///
/// The routes are open: the files hold no data. The page signs in with an API key kept in the
/// tab's `sessionStorage` and sends it as `Authorization: Bearer` on every data call, so no
/// cookie exists for a cross-site request to ride on.
///
/// Every answer, 404 included, carries ``securityHeaders`` (a strict Content-Security-Policy:
/// only this origin's scripts, styles and connections, no inline script or style, no framing).
/// Files carry a strong `ETag` (SHA-256 of their bytes) and `Cache-Control: no-cache`: the
/// browser revalidates on each load and gets `304` while the binary is the same.
struct DashboardController: Sendable {
    /// One embedded file, ready to answer.
    struct Asset: Sendable {
        var body: ByteBuffer
        var contentType: String
        var etag: String
    }

    /// The files by name.
    let assets: [String: Asset]

    /// The headers on every dashboard answer.
    static let securityHeaders: HTTPFields = [
        HTTPField.Name("Content-Security-Policy")!:
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            + "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        HTTPField.Name("X-Content-Type-Options")!: "nosniff",
        HTTPField.Name("Referrer-Policy")!: "no-referrer",
    ]

    /// The page `GET /dashboard` answers.
    static let page = "index.html"

    /// Content types by file extension (the plugin embeds only these).
    static let contentTypes = [
        "html": "text/html; charset=utf-8", "css": "text/css; charset=utf-8",
        "js": "text/javascript; charset=utf-8", "svg": "image/svg+xml",
    ]

    /// The controller over `files` (by default the embedded ones).
    init(files: [(file: String, bytes: [UInt8])] = embeddedDashboardFiles) {
        var assets: [String: Asset] = [:]
        for (name, bytes) in files {
            let ext = String(name.split(separator: ".").last ?? "")
            let digest = Hex.string(SHA256.hash(data: bytes).prefix(16))
            assets[name] = Asset(
                body: ByteBuffer(bytes: bytes), contentType: Self.contentTypes[ext] ?? "application/octet-stream",
                etag: "\"\(digest)\"")
        }
        self.assets = assets
    }

    /// `GET /dashboard`.
    func page(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        answer(Self.page, request: request)
    }

    /// `GET /dashboard/{asset}`.
    func asset(_ request: Request, context: HeraldRequestContext) async throws -> Response {
        answer(context.parameters.get("asset") ?? "", request: request)
    }

    /// The file `name` (200, or 304 when `If-None-Match` names its ETag), or a JSON 404.
    func answer(_ name: String, request: Request) -> Response {
        guard let asset = assets[name] else {
            var response = APIError(.notFound, code: .notFound, message: "the dashboard has no file \(name.prefix(64))")
                .response()
            response.headers.append(contentsOf: Self.securityHeaders)
            return response
        }
        var headers = Self.securityHeaders
        headers[.eTag] = asset.etag
        headers[.cacheControl] = "no-cache"
        if let match = request.headers[.ifNoneMatch],
            match.split(separator: ",").contains(where: { $0.trimmingCharacters(in: .whitespaces) == asset.etag })
        {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentType] = asset.contentType
        return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: asset.body))
    }
}

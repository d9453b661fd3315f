import Crypto
import Foundation

/// Validates `Authorization: SharedAccessSignature sr=…&sig=…&se=…&skn=…` as the reference's
/// "consequences for the emulator" describe:
///
/// 1. the fields are an unordered set;
/// 2. `sig` must be base64(HMAC-SHA256(key's UTF-8 bytes, raw `sr` + "\n" + `se`)), compared in
///    constant time; the raw `sr` text is signed, so the hex case of its escapes does not matter;
/// 3. `se` must not be in the past;
/// 4. the decoded `sr`, with scheme, port and query ignored and compared case-insensitively, must
///    name the request's host and a path prefix of the request (namespace root, hub, or the full
///    operation path: the .NET, JS and Java styles all pass).
///
/// Parsed tokens are cached by header text, so a client reusing a token pays for one HMAC.
final class SharedAccessSignatureValidator: Sendable {
    struct Rule: Sendable {
        var name: String
        var key: SymmetricKey
        var rights: Set<EmulatedAccessRight>
    }

    enum Outcome: Sendable {
        case authorized(Rule)
        case rejected(HubError)
    }

    /// What a token says, once its signature has been checked.
    private struct ParsedToken: Sendable {
        var rule: Rule?
        var failure: HubError?
        var expiry: Int64
        var audienceHost: String
        var audienceSegments: [String]
    }

    private let rules: [String: Rule]
    private let cache = Locked([String: ParsedToken]())
    private static let cacheLimit = 4096

    init(rules: [EmulatedAccessRule]) {
        var byName: [String: Rule] = [:]
        for rule in rules {
            byName[rule.name] = Rule(name: rule.name, key: SymmetricKey(data: Data(rule.key.utf8)), rights: rule.rights)
        }
        self.rules = byName
    }

    /// Validates a request's `Authorization` header.
    /// - Parameters:
    ///   - host: the request's host (from `Host`/`:authority`), nil if absent.
    ///   - pathSegments: the request path's decoded segments, the hub first.
    func validate(authorization: String?, host: String?, pathSegments: [String], now: Date) -> Outcome {
        guard let authorization, !authorization.isEmpty else {
            return .rejected(.unauthorized("MissingToken: The request has no Authorization header with a SharedAccessSignature token."))
        }
        let token: ParsedToken
        if let cached = cache.withLock({ $0[authorization] }) {
            token = cached
        } else {
            token = parse(authorization)
            cache.withLock { cache in
                if cache.count >= Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
                cache[authorization] = token
            }
        }
        if let failure = token.failure { return .rejected(failure) }
        guard let rule = token.rule else { return .rejected(.unauthorized("InvalidSignature: The token has an invalid signature.")) }
        if token.expiry < Int64(now.timeIntervalSince1970.rounded(.down)) {
            return .rejected(.unauthorized("ExpiredToken: The token is expired (se=\(token.expiry))."))
        }
        if let host, !token.audienceHost.isEmpty, Self.stripPort(host.lowercased()) != token.audienceHost {
            return .rejected(.unauthorized("InvalidAudience: The token audience host '\(token.audienceHost)' does not match the request."))
        }
        guard token.audienceSegments.count <= pathSegments.count,
            zip(token.audienceSegments, pathSegments).allSatisfy({ $0.caseInsensitiveEquals($1) })
        else {
            return .rejected(
                .unauthorized("InvalidAudience: The token audience '/\(token.audienceSegments.joined(separator: "/"))' does not cover this request."))
        }
        return .authorized(rule)
    }

    private func parse(_ header: String) -> ParsedToken {
        func failure(_ error: HubError) -> ParsedToken {
            ParsedToken(rule: nil, failure: error, expiry: 0, audienceHost: "", audienceSegments: [])
        }
        var text = Substring(header.trimmingWhitespace())
        let scheme = "SharedAccessSignature"
        guard text.count > scheme.count, text.prefix(scheme.count).caseInsensitiveEquals(scheme),
            text[text.index(text.startIndex, offsetBy: scheme.count)].isWhitespace
        else {
            return failure(.unauthorized("MalformedToken: The Authorization header is not a SharedAccessSignature token."))
        }
        text = text.dropFirst(scheme.count).drop(while: { $0.isWhitespace })
        var fields: [String: Substring] = [:]
        for part in text.split(separator: "&") {
            guard let eq = part.firstIndex(of: "=") else { continue }
            let name = part[..<eq].lowercased()
            if fields[name] == nil { fields[name] = part[part.index(after: eq)...] }
        }
        guard let sr = fields["sr"], let sig = fields["sig"], let se = fields["se"], let skn = fields["skn"] else {
            return failure(.unauthorized("MalformedToken: The token must have sr, sig, se and skn."))
        }
        guard let expiry = Int64(se) else {
            return failure(.unauthorized("MalformedToken: se must be whole seconds since 1970."))
        }
        let keyName = PercentEncoding.decode(skn)
        guard let rule = rules[keyName] ?? rules.first(where: { $0.key.caseInsensitiveEquals(keyName) })?.value else {
            return failure(.unauthorized("InvalidSignature: The token has an invalid signature (unknown key name)."))
        }
        guard let signature = Data(base64Encoded: PercentEncoding.decode(sig)) else {
            return failure(.unauthorized("InvalidSignature: The token has an invalid signature."))
        }
        let message = Data((String(sr) + "\n" + String(se)).utf8)
        guard HMAC<SHA256>.isValidAuthenticationCode(signature, authenticating: message, using: rule.key) else {
            return failure(.unauthorized("InvalidSignature: The token has an invalid signature."))
        }
        let (host, segments) = Self.audience(PercentEncoding.decode(sr))
        return ParsedToken(rule: rule, failure: nil, expiry: expiry, audienceHost: host, audienceSegments: segments)
    }

    /// Host (port removed) and path segments of a decoded `sr`, lower-cased, scheme and query dropped.
    static func audience(_ resource: String) -> (host: String, segments: [String]) {
        var text = Substring(resource.lowercased())
        if let scheme = text.range(of: "://") { text = text[scheme.upperBound...] }
        if let q = text.firstIndex(where: { $0 == "?" || $0 == "#" }) { text = text[..<q] }
        let slash = text.firstIndex(of: "/") ?? text.endIndex
        let host = stripPort(String(text[..<slash]))
        let segments = text[slash...].split(separator: "/").map { PercentEncoding.decode($0) }
        return (host, segments)
    }

    static func stripPort(_ host: String) -> String {
        if host.hasPrefix("[") {
            if let close = host.firstIndex(of: "]") { return String(host[...close]) }
            return host
        }
        if let colon = host.lastIndex(of: ":"), host[host.index(after: colon)...].allSatisfy(\.isNumber) {
            return String(host[..<colon])
        }
        return host
    }
}

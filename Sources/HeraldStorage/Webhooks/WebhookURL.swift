public import Foundation
public import HeraldDomain
import NIOCore

/// The rules a webhook URL meets when an endpoint is saved: `https` (or `http` to a loopback
/// host when private addresses are allowed), a host, no credentials, at most 2,048 characters,
/// and, when the host is an IP address, one ``WebhookAddressPolicy`` allows. A host name is
/// resolved and its addresses checked at each delivery, where the connection is made.
public enum WebhookURL {
    public static let maxLength = 2048

    /// `text` as a URL, or `invalid_url` with the reason.
    public static func validated(_ text: String, allowPrivate: Bool) throws(DomainError) -> URL {
        func refuse(_ reason: String) -> DomainError { DomainError(code: .invalidURL, message: "url \(reason)") }
        guard text.count <= maxLength else { throw refuse("is longer than \(maxLength) characters") }
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), var host = url.host, !host.isEmpty
        else { throw refuse("is not an absolute URL with a host") }
        guard url.user == nil, url.password == nil else {
            throw refuse("carries credentials; the endpoint's secret authenticates Herald")
        }
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let literal = try? SocketAddress(ipAddress: host, port: url.port ?? 443)
        if let literal, case .refused(let addressClass) = WebhookAddressPolicy(allowPrivate: allowPrivate).check(literal) {
            let hint = [.loopback, .private, .linkLocal].contains(addressClass) ? " (HERALD_WEBHOOK_ALLOW_PRIVATE allows it)" : ""
            throw refuse("names \(host), a \(addressClass) address, which Herald does not call\(hint)")
        }
        switch scheme {
        case "https": break
        case "http":
            let loopback = host.lowercased() == "localhost" || literal.map { WebhookAddressPolicy.classify($0) == .loopback } == true
            guard allowPrivate, loopback else {
                throw refuse("uses http; webhooks need https (http only to loopback, with HERALD_WEBHOOK_ALLOW_PRIVATE)")
            }
        default: throw refuse("uses \(scheme); webhooks need https")
        }
        return url
    }
}

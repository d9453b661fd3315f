import Foundation
import HeraldDomain
import HeraldStorage
import Testing

/// The URL rules an endpoint meets when it is saved: addresses Herald does not call are refused
/// with the reason, before any connection.
@Suite("Webhook URLs")
struct WebhookURLTests {
    static func refusal(_ url: String, allowPrivate: Bool = false) -> String? {
        do {
            _ = try WebhookURL.validated(url, allowPrivate: allowPrivate)
            return nil
        } catch {
            #expect(error.code == .invalidURL)
            return error.message
        }
    }

    @Test("private, loopback, link-local and metadata addresses are refused, naming the address class")
    func refusedAddresses() {
        let cases: [(String, String)] = [
            ("https://127.0.0.1/hook", "loopback"), ("https://[::1]:8443/hook", "loopback"),
            ("https://10.0.0.1/hook", "private"), ("https://192.168.1.20/hook", "private"),
            ("https://169.254.169.254/latest/meta-data", "metadata"), ("https://[fe80::1]/hook", "link-local"),
            ("https://[::ffff:10.0.0.1]/hook", "private"), ("https://0.0.0.0/hook", "unspecified"),
        ]
        for (url, kind) in cases {
            let message = Self.refusal(url)
            #expect(message?.contains("a \(kind) address") == true, "\(url): \(message ?? "accepted")")
        }
        // The operator's switch allows private and loopback receivers, never metadata ones.
        #expect(Self.refusal("https://10.0.0.1/hook", allowPrivate: true) == nil)
        #expect(Self.refusal("http://127.0.0.1:9000/hook", allowPrivate: true) == nil)
        #expect(Self.refusal("https://169.254.169.254/", allowPrivate: true)?.contains("metadata") == true)
    }

    @Test("https only (http to loopback with the switch), a host, no credentials, at most 2,048 characters")
    func shape() {
        #expect(Self.refusal("https://hooks.example.com/herald?x=1") == nil)
        #expect(Self.refusal("http://hooks.example.com/herald")?.contains("uses http") == true)
        #expect(Self.refusal("http://hooks.example.com/herald", allowPrivate: true)?.contains("uses http") == true)
        #expect(Self.refusal("http://localhost:9000/hook", allowPrivate: true) == nil)
        #expect(Self.refusal("ftp://hooks.example.com/")?.contains("uses ftp") == true)
        #expect(Self.refusal("https://user:secret@hooks.example.com/")?.contains("credentials") == true)
        #expect(Self.refusal("/relative/hook")?.contains("absolute URL") == true)
        #expect(Self.refusal("https://hooks.example.com/" + String(repeating: "a", count: 2048))?.contains("longer") == true)
    }
}

import Foundation

/// The payload formats of a hub send (the `hub_sends.format` of DESIGN.md).
public enum NotificationFormat: String, Sendable, Hashable, Codable, CaseIterable {
    /// APNs JSON.
    case apple
    /// FCM HTTP v1 JSON.
    case fcmv1
    /// WNS XML (toast, tile, badge) or raw.
    case windows
    /// Template parameters, expanded by the hub per registration.
    case template

    /// Parses the `pns` query parameter of the tutorial send endpoint: `apns`; `fcm`, `fcmv1`
    /// and `gcm` (all FCM v1, as in registration); `wns`. Case-insensitive.
    public init(tutorialPNS name: String) throws(DomainError) {
        switch name.lowercased() {
        case "apns": self = .apple
        case "fcm", "fcmv1", "gcm": self = .fcmv1
        case "wns": self = .windows
        default:
            throw DomainError(
                code: .unknownPNS, message: "unknown pns \"\(name.prefix(20))\"; use apns, fcm (or fcmv1, gcm) or wns")
        }
    }
}

/// The tutorial's "notify users" message, `From <sender>: <text>`, as each PNS expects it.
///
/// The tutorial backend built these payloads by concatenating strings, so a quote, a `<` or a
/// backslash in a message broke them. Here JSON comes from `JSONSerialization` and XML text is
/// escaped by ``xmlText(_:)``, so any text arrives intact.
public enum TutorialMessage {
    /// The text the recipient sees.
    public static func text(from sender: String, _ message: String) -> String { "From \(sender): \(message)" }

    /// The payload for `format` (not `template`, which carries parameters instead):
    /// - `apple`: `{"aps":{"alert":"From alice: Hello"}}`
    /// - `fcmv1`: an FCM v1 data message, `{"message":{"data":{"message":"From alice: Hello"}}}`
    /// - `windows`: a `ToastText01` toast.
    public static func payload(
        _ format: NotificationFormat, from sender: String, _ message: String
    ) throws(DomainError)
        -> String
    {
        let text = text(from: sender, message)
        switch format {
        case .apple: return try json(["aps": ["alert": text]])
        case .fcmv1: return try json(["message": ["data": ["message": text]]])
        case .windows:
            return #"<toast><visual><binding template="ToastText01"><text id="1">"#
                + xmlText(text) + "</text></binding></visual></toast>"
        case .template:
            throw DomainError(code: .invalidFormat, message: "a template send carries parameters, not a payload")
        }
    }

    /// `text` escaped for an XML 1.0 text node or attribute value: `& < > " '` become entity
    /// references, and characters XML 1.0 cannot carry (most control characters) are dropped.
    public static func xmlText(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&apos;"
            case "\t", "\n", "\r": out.unicodeScalars.append(scalar)
            default:
                let value = scalar.value
                let allowed = (0x20...0xD7FF).contains(value) || (0xE000...0xFFFD).contains(value) || value >= 0x10000
                if allowed { out.unicodeScalars.append(scalar) }
            }
        }
        return out
    }

    private static func json(_ object: [String: Any]) throws(DomainError) -> String {
        do {
            let data = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
            return String(decoding: data, as: UTF8.self)
        } catch {
            throw DomainError(code: .invalidPayload, message: "the message cannot be encoded as JSON")
        }
    }
}

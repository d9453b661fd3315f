/// A parsed Notification Hubs connection string:
/// `Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>`.
///
/// Parts are separated by `;`, each split on its **first** `=` (keys end in `=`), key names
/// matched case-insensitively, whitespace around names and values trimmed, empty parts
/// skipped. Other keys (`EntityPath`, `OperationTimeout`, …) are ignored.
///
/// The endpoint's `sb://` scheme becomes `https://`, as the official SDKs do; `http://` and
/// `https://` endpoints are used as written (so a local emulator can be plain HTTP).
///
/// `description` hides the key.
public struct NotificationHubConnectionString: Sendable, Hashable, CustomStringConvertible {
    /// The `Endpoint` value exactly as written.
    public let endpoint: String
    /// The base URL requests go to, with `sb://` mapped to `https://` and a trailing `/`,
    /// e.g. `https://contoso.servicebus.windows.net/`.
    public let serviceURL: String
    /// `SharedAccessKeyName`: the access rule's name (`skn` in tokens).
    public let sharedAccessKeyName: String
    /// `SharedAccessKey`: the rule's key, used as UTF-8 text (never base64-decoded).
    public let sharedAccessKey: String
    /// `EntityPath`, when the string has one (Azure emits it for hub-level rules).
    public let entityPath: String?

    /// Parses a connection string.
    ///
    /// - Throws: ``NotificationHubsError`` with code `invalid_connection_string` when
    ///   `Endpoint`, `SharedAccessKeyName` or `SharedAccessKey` is missing or empty, or the
    ///   endpoint's scheme is not `sb`, `http` or `https`.
    public init(_ connectionString: String) throws(NotificationHubsError) {
        var values: [String: String] = [:]
        for part in connectionString.split(separator: ";", omittingEmptySubsequences: true) {
            guard let equals = part.firstIndex(of: "=") else {
                if part.allSatisfy(\.isWhitespace) { continue }
                throw Self.invalid("part without '='")
            }
            let name = part[..<equals].trimmingWhitespace().lowercased()
            let value = part[part.index(after: equals)...].trimmingWhitespace()
            if name.isEmpty { continue }
            values[name] = value
        }
        guard let endpoint = values["endpoint"], !endpoint.isEmpty else { throw Self.invalid("missing Endpoint") }
        guard let keyName = values["sharedaccesskeyname"], !keyName.isEmpty else {
            throw Self.invalid("missing SharedAccessKeyName")
        }
        guard let key = values["sharedaccesskey"], !key.isEmpty else { throw Self.invalid("missing SharedAccessKey") }

        let lower = endpoint.lowercased()
        var url: String
        if lower.hasPrefix("sb://") {
            url = "https://" + endpoint.dropFirst(5)
        } else if lower.hasPrefix("https://") || lower.hasPrefix("http://") {
            url = endpoint
        } else {
            throw Self.invalid("Endpoint scheme must be sb, https or http")
        }
        let afterScheme = url[url.index(url.firstIndex(of: ":")!, offsetBy: 3)...]
        guard !afterScheme.isEmpty, afterScheme.first != "/" else { throw Self.invalid("Endpoint has no host") }
        if let query = url.firstIndex(where: { $0 == "?" || $0 == "#" }) { url = String(url[..<query]) }
        if !url.hasSuffix("/") { url += "/" }

        self.endpoint = endpoint
        self.serviceURL = url
        self.sharedAccessKeyName = keyName
        self.sharedAccessKey = key
        self.entityPath = values["entitypath"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Builds a connection string from its parts (the endpoint as `Endpoint=` would hold it).
    public init(endpoint: String, sharedAccessKeyName: String, sharedAccessKey: String) throws(NotificationHubsError) {
        try self.init("Endpoint=\(endpoint);SharedAccessKeyName=\(sharedAccessKeyName);SharedAccessKey=\(sharedAccessKey)")
    }

    /// The connection string with the key hidden.
    public var description: String {
        "Endpoint=\(endpoint);SharedAccessKeyName=\(sharedAccessKeyName);SharedAccessKey=<redacted>"
    }

    private static func invalid(_ reason: String) -> NotificationHubsError {
        NotificationHubsError(code: .invalidConnectionString, operation: .parseConnectionString, reason: reason)
    }
}

extension Substring {
    func trimmingWhitespace() -> String {
        var slice = self[...]
        while let first = slice.first, first.isWhitespace { slice = slice.dropFirst() }
        while let last = slice.last, last.isWhitespace { slice = slice.dropLast() }
        return String(slice)
    }
}

/// A push handle (APNs device token, FCM registration token, WNS channel URI): checks what
/// each service's handles look like and redacts them for logs.
public enum DeviceHandle {
    /// The longest handle accepted (FCM tokens are ~160 characters, WNS URIs a few hundred).
    public static let maxLength = 2048

    /// Normalises and checks a handle for `platform`. APNs tokens are hex (the tutorial
    /// client sends upper-case hex without spaces or brackets; spaces and `<>` are removed
    /// and the result upper-cased); WNS handles are `https` channel URIs and FCM tokens printable
    /// ASCII without spaces (a direct send carries the handle in a request header).
    public static func normalized(_ handle: String, for platform: Platform) throws(DomainError) -> String {
        let trimmed = handle.trimmingCharacters(in: " \t\r\n")
        guard !trimmed.isEmpty, trimmed.count <= maxLength else {
            throw DomainError(code: .invalidHandle, message: "the device handle must be 1 to \(maxLength) characters")
        }
        switch platform {
        case .apns:
            let hex = trimmed.filter { $0 != " " && $0 != "<" && $0 != ">" }.uppercased()
            guard hex.count >= 16, hex.count % 2 == 0, hex.allSatisfy(\.isHexDigit) else {
                throw DomainError(code: .invalidHandle, message: "an APNs device token is an even number of hex digits")
            }
            return hex
        case .fcmv1:
            guard trimmed.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) else {
                throw DomainError(code: .invalidHandle, message: "an FCM registration token is printable ASCII without spaces")
            }
            return trimmed
        case .wns:
            // Printable ASCII only: a direct send carries the handle in a request header.
            guard trimmed.lowercased().hasPrefix("https://"),
                trimmed.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            else {
                throw DomainError(code: .invalidHandle, message: "a WNS channel is an https:// URI of printable ASCII")
            }
            return trimmed
        }
    }

    /// The first six characters and the length, for logs: never log a whole handle.
    public static func redacted(_ handle: String) -> String {
        "\(handle.prefix(6))…(\(handle.count))"
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        let characters = Set(set)
        var slice = Substring(self)
        while let first = slice.first, characters.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, characters.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}

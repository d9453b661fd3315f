/// What a value must be to travel as an HTTP header value of a hub request (`apns-collapse-id`,
/// `ServiceBusNotification-Tags`, `ServiceBusNotification-DeviceHandle`): checked when a request
/// is accepted, so a value that no hub call could carry is a `400` for its sender rather than a
/// send that fails (or, with CR/LF, splits the request) later.
public enum HeaderValue {
    /// Whether `text` is non-empty, has no control characters (C0, DEL, C1; a tab included) and
    /// no leading or trailing space (HTTP drops those, so the hub would see another value).
    public static func isSafe(_ text: some StringProtocol) -> Bool {
        guard let first = text.unicodeScalars.first, let last = text.unicodeScalars.last, first != " ", last != " "
        else { return false }
        return text.unicodeScalars.allSatisfy { !isControl($0) }
    }

    /// A control character: U+0000–U+001F, U+007F–U+009F.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }
}

/// The server-assigned tag that tells the hub a device's time zone: `tz:` and the IANA name
/// with `/` written `:` and `+` written `_plus_` (the hub's tags allow only ASCII letters,
/// digits and `_ @ # . : -`), so `Europe/Paris` is `tz:Europe:Paris`,
/// `America/Argentina/Buenos_Aires` is `tz:America:Argentina:Buenos_Aires` and `Etc/GMT+5` is
/// `tz:Etc:GMT_plus_5`. The encoding is reversible: no IANA name contains `:` or `_plus_`.
///
/// Every device carries exactly one: its user's zone, else the configured default. Clients may
/// not set `tz:` tags themselves (``TagPolicy/reservedPrefixes``); senders may target them.
public enum ZoneTag {
    /// The prefix only the server sets.
    public static let prefix = "tz:"

    /// The tag of zone `identifier` (an identifier ``TimeZoneName`` accepted).
    public static func tag(forZone identifier: String) -> String {
        prefix + identifier.replacingOccurrences(of: "/", with: ":").replacingOccurrences(of: "+", with: "_plus_")
    }

    /// The zone a `tz:` tag names, or nil when `tag` is not one.
    public static func zone(fromTag tag: String) -> String? {
        guard tag.hasPrefix(prefix) else { return nil }
        return String(tag.dropFirst(prefix.count)).replacingOccurrences(of: "_plus_", with: "+")
            .replacingOccurrences(of: ":", with: "/")
    }

    /// Whether `tag` is a zone tag (exactly the server's prefix).
    public static func isZoneTag(_ tag: String) -> Bool { tag.hasPrefix(prefix) }
}

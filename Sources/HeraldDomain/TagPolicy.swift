/// Which tags a device may carry. The server adds `username:<user>` and the device's zone tag
/// (`tz:…`, ``ZoneTag``) itself; clients may add
/// their own tags (categories such as `World`), within the hub's rules and Herald's: ASCII
/// only, and no reserved prefix in any case (the hub's case rule for tags is not documented,
/// so Herald assumes it may ignore case).
public struct TagPolicy: Sendable, Hashable {
    /// Prefixes only the server may use: `username:` and `from:` identify people, `tz:` carries
    /// the device's time zone (``ZoneTag``), and `$` is the hub's own (`$InstallationId:{…}`,
    /// `$UserId:{…}`); `herald-device:` marks what Herald wrote to the hub (``HubMarker``).
    public static let reservedPrefixes = ["username:", "from:", ZoneTag.prefix, "$", HubMarker.prefix]
    /// The tags the server adds to every device: `username:<user>` and the zone tag.
    public static let serverTags = 2
    /// The tags the hub holds for a device on top of its own: Herald's marker (``HubMarker``).
    public static let markerTags = 1
    /// The hub's limit on one tag's length.
    public static let maxTagLength = 120
    /// The hub's limit on tags per registration (all tiers).
    public static let hubMaxTags = 60

    /// Most tags a client may set on one device (the server's two tags come on top).
    public var maxClientTags: Int

    /// Creates a policy. `maxClientTags` is clamped so that, with the server's tags and the
    /// marker, a device never exceeds the hub's 60.
    public init(maxClientTags: Int = 20) {
        self.maxClientTags = max(0, min(maxClientTags, Self.hubMaxTags - Self.serverTags - Self.markerTags))
    }

    /// The tag that routes notifications to a user.
    public static func userTag(_ user: String) -> String { "username:\(user)" }

    /// Whether `tag` is well-formed for the hub: 1–120 ASCII letters, digits and `_ @ # . : -`
    /// (the hub's documented tag characters). Only ASCII: the hub's own check takes any Unicode
    /// letter and may compare tags ignoring case, so a letter that case-folds to an ASCII one
    /// (`ſ` to `s`, `K` (Kelvin) to `k`) could make a tag equal to a reserved one at the hub.
    public static func isWellFormed(_ tag: String) -> Bool {
        guard !tag.isEmpty, tag.count <= maxTagLength else { return false }
        return tag.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII
                && (("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
                    || "_@#.:-".unicodeScalars.contains(scalar))
        }
    }

    /// The reserved prefix `tag` starts with, compared ignoring case the way a case-insensitive
    /// hub might: after upper- and then lower-casing, so `USERNAME:`, `UserName:` and `uſername:`
    /// (whose `ſ` upper-cases to `S`) all count as `username:`.
    public static func reservedPrefix(of tag: String) -> String? {
        let folded = tag.uppercased().lowercased()
        return reservedPrefixes.first { folded.hasPrefix($0) || tag.lowercased().hasPrefix($0) }
    }

    /// Checks the tags a client asked for and returns the device's full tag set: the client's
    /// tags (deduplicated, in order) followed by `username:<user>`. The store appends the zone
    /// tag when it saves the device (it depends on the user's zone, kept in the database).
    public func tags(for user: String, clientTags: [String]) throws(DomainError) -> [String] {
        var seen = Set<String>()
        var result: [String] = []
        for tag in clientTags {
            if let prefix = Self.reservedPrefix(of: tag) {
                throw DomainError(
                    code: .reservedTag,
                    message:
                        "tag \"\(tag.prefix(40))\" uses the reserved prefix \"\(prefix)\" (in any case); the server sets those"
                )
            }
            guard Self.isWellFormed(tag) else {
                throw DomainError(
                    code: .invalidTag,
                    message:
                        "tag \"\(tag.prefix(40))\" must be 1 to \(Self.maxTagLength) ASCII letters, digits and _ @ # . : -"
                )
            }
            if seen.insert(tag).inserted { result.append(tag) }
        }
        guard result.count <= maxClientTags else {
            throw DomainError(
                code: .tooManyTags, message: "a device may carry at most \(maxClientTags) tags of its own; got \(result.count)"
            )
        }
        let own = Self.userTag(user)
        guard Self.isWellFormed(own) else {
            throw DomainError(code: .invalidUser, message: "the user name cannot form a valid tag")
        }
        return result + [own]
    }
}

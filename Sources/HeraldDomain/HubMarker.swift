/// The tag that marks a hub registration or installation as Herald's:
/// `herald-device:<device id, lower-case UUID>`.
///
/// Herald adds it to everything it writes to any hub (primary, standby, rebuild target) and never
/// stores it in `devices.tags`. Reconcile deletes only registrations that carry it, so
/// registrations another backend created in the same hub are reported, never touched. A tag
/// rather than an installation-id scheme: registrations have no id of their choosing (the hub
/// makes it), tags are the one field both registrations and installations carry, and a tag
/// also finds a device's registration on a hub (`GET /tags/{tag}/registrations`) without
/// knowing its id. Clients may not send tags with this prefix (``TagPolicy``).
public enum HubMarker {
    /// The prefix, reserved by ``TagPolicy``.
    public static let prefix = "herald-device:"

    /// The marker of `device`.
    public static func tag(for device: DeviceID) -> String { prefix + device.description }

    /// The device a set of hub tags marks, if any (the first marker that parses).
    public static func device(in tags: [String]) -> DeviceID? {
        for tag in tags where tag.hasPrefix(prefix) {
            if let id = try? DeviceID(parsing: tag.dropFirst(prefix.count)) { return id }
        }
        return nil
    }

    /// Whether a hub tag is not one of the device's own: the marker, or one the hub adds itself
    /// (`$InstallationId:{…}`, `$UserId:{…}`). Comparisons with PostgreSQL leave these out.
    public static func isBookkeeping(_ tag: String) -> Bool {
        tag.hasPrefix(prefix) || tag.hasPrefix("$")
    }
}

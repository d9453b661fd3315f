public import Foundation

/// Checks the time zone a schedule is read in. Accepted: `UTC`, and IANA Area/Location names
/// (`Europe/Berlin`, `America/Argentina/Buenos_Aires`, `Etc/GMT-3`) that the time zone database
/// knows, spelled exactly (case included). Refused: abbreviations and legacy names such as `EST`,
/// `CET` or `US/Eastern`, and offsets such as `GMT+5` or `UTC+01:00`, even where Foundation would
/// accept them: an abbreviation does not say which rules apply, and an offset has no DST.
public enum TimeZoneName {
    /// The longest identifier accepted (the longest IANA name is about 30 characters).
    public static let maxLength = 64

    /// The first component of every IANA Area/Location name.
    static let areas: Set<Substring> = [
        "Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Europe", "Indian", "Pacific",
        "Etc",
    ]

    /// Returns the zone named `identifier`, or throws ``ScheduleError/notAnIANATimeZoneName(_:)``
    /// or ``ScheduleError/unknownTimeZone(_:)`` saying why not.
    public static func validate(_ identifier: String) throws(ScheduleError) -> TimeZone {
        if identifier == "UTC", let utc = TimeZone(secondsFromGMT: 0) { return utc }
        let parts = identifier.split(separator: "/", omittingEmptySubsequences: false)
        guard identifier.utf8.count <= maxLength, parts.count >= 2, let area = parts.first, areas.contains(area),
            parts.allSatisfy({ !$0.isEmpty })
        else { throw .notAnIANATimeZoneName(identifier) }
        // Foundation normalises some names it accepts (offsets become "GMT+0500"); an exact round
        // trip means the database has this very name.
        guard let zone = TimeZone(identifier: identifier), zone.identifier == identifier else {
            throw .unknownTimeZone(identifier)
        }
        return zone
    }
}

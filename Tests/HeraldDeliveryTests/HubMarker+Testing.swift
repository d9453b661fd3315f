import HeraldDomain

extension Array where Element == String {
    /// Hub tags without Herald's marker (`herald-device:<id>`), which every registration and
    /// installation Herald writes carries on top of the device's own tags.
    var withoutMarker: [String] { filter { !$0.hasPrefix(HubMarker.prefix) } }
}

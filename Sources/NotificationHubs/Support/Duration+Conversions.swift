/// The client's duration conversions (the library imports none of Herald's modules).
extension Duration {
    /// The duration in seconds, with its fraction.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// Whole milliseconds, rounded toward zero.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, rounded toward zero.
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}

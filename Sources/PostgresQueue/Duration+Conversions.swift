/// The queue's own duration conversions: the library stands alone, importing nothing of the
/// application that uses it.
extension Duration {
    /// Whole milliseconds, rounded toward zero.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, rounded toward zero (what swift-metrics' `Timer` records).
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }

    /// In seconds, for `Date` arithmetic.
    var timeInterval: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

/// Duration conversions for Herald's own modules (`package`: invisible outside this package).
/// The reusable libraries (`PostgresQueue`, `NotificationHubs`, `NotificationHubsEmulator`)
/// cannot import Herald's modules and keep an internal copy of the ones they need.
extension Duration {
    /// The duration in seconds, with its fraction.
    package var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }

    /// The duration in milliseconds, with its fraction.
    package var milliseconds: Double { Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15 }

    /// Whole milliseconds, rounded toward zero.
    package var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, rounded toward zero (what swift-metrics' `Timer` records).
    package var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}

import Foundation

/// The emulator's duration conversions (it shares no code with the client it checks, nor
/// with Herald).
extension Duration {
    /// The duration in seconds, with its fraction.
    var seconds: TimeInterval { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

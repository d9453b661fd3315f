import Crypto
public import HeraldDomain

extension DeviceHandle {
    /// What senders and the audit see instead of a push handle: the first 16 hex digits (64
    /// bits) of the SHA-256 of the stored (normalised) handle, `…`, and the handle's last four
    /// characters, e.g. `3f2a9c0d51be7e44…A1B2`.
    ///
    /// The same handle always gives the same fingerprint, so an operator holding a handle can
    /// find its sends and moves, and support can match "the token ending in A1B2"; the handle
    /// cannot be read back from it (APNs and FCM handles carry far more than 64 bits the hash
    /// hides).
    public static func fingerprint(_ handle: String) -> String {
        let digest = SHA256.hash(data: Array(handle.utf8))
        let hex = digest.prefix(8).map { byte in
            let text = String(byte, radix: 16)
            return byte < 16 ? "0" + text : text
        }.joined()
        return "\(hex)…\(handle.suffix(4))"
    }
}

import Foundation
import HeraldDomain

/// The one cursor and page size of every keyset-paged list (campaigns, runs, notifications): a
/// cursor is opaque to clients, base64url without padding of a short text that names the last
/// row's position, which only the store that made it reads back.
enum PageCursor {
    /// The page size a list asked for (`limit`, else `defaultSize`); a `DomainError`
    /// `invalid_limit` outside 1...`maxSize`.
    static func pageSize(_ limit: Int?, default defaultSize: Int, max maxSize: Int) throws(DomainError) -> Int {
        let limit = limit ?? defaultSize
        guard (1...maxSize).contains(limit) else {
            throw DomainError(code: .invalidLimit, message: "limit is 1 to \(maxSize); got \(limit)")
        }
        return limit
    }

    /// A cursor naming the position `text`.
    static func make(_ text: String) -> String {
        Data(text.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The position text of `cursor`, which is at most `maxLength` bytes long; nil when it is
    /// not base64url.
    static func text(of cursor: String, maxLength: Int) -> String? {
        guard cursor.utf8.count <= maxLength else { return nil }
        var base64 = cursor.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// A cursor after the row with id `id` (`id:<id>`).
    static func make(id: Int64) -> String { make("id:\(id)") }

    /// The id of a cursor made by ``make(id:)``.
    static func id(of cursor: String) throws(DomainError) -> Int64 {
        guard let text = text(of: cursor, maxLength: 40), text.hasPrefix("id:"), let id = Int64(text.dropFirst(3)),
            id >= 0
        else { throw invalid }
        return id
    }

    /// A cursor after the row created at `micros` (microseconds since 1970, exact) with id `id`
    /// (`micros:uuid`).
    static func make(micros: Int64, id: UUID) -> String { make("\(micros):\(id.uuidString.lowercased())") }

    /// The position of a cursor made by ``make(micros:id:)``.
    static func timeAndID(of cursor: String) throws(DomainError) -> (Int64, UUID) {
        guard let text = text(of: cursor, maxLength: 200) else { throw invalid }
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let micros = Int64(parts[0]), micros >= 0, let id = UUID(uuidString: String(parts[1]))
        else { throw invalid }
        return (micros, id)
    }

    static var invalid: DomainError {
        DomainError(code: .invalidCursor, message: "cursor is not one this API returned")
    }
}

import Foundation

extension RawRepresentable where RawValue == String {
    /// The value stored as `text` in `column` (`table.column`); a text this build does not know is
    /// ``StorageError/corruptRow(column:value:)``, never a default.
    init(stored text: String, column: String) throws(StorageError) {
        guard let value = Self(rawValue: text) else { throw .corruptRow(column: column, value: text) }
        self = value
    }
}

/// JSON stored as text in `column` (`table.column`), decoded strictly: text that does not decode
/// is ``StorageError/corruptRow(column:value:)``.
func decodeStoredJSON<T: Decodable>(_ type: T.Type, _ text: String, column: String) throws(StorageError) -> T {
    do {
        return try JSONDecoder().decode(type, from: Data(text.utf8))
    } catch {
        throw .corruptRow(column: column, value: text)
    }
}

import Crypto
import Foundation
import HeraldDomain

/// One recipient of `heraldctl send`: a line of the users file that passed the local checks.
struct Recipient: Sendable {
    /// The line's number in the file, from 1 (the CSV header is line 1).
    var line: Int
    /// The user name (the `username:<name>` tag the notification goes to).
    var user: String
    /// Per-user template parameters from the CSV's other columns (empty cells left out).
    var parameters: [String: String]
}

/// A line that `heraldctl send` will not send, with why: written to the rejects file.
struct RejectedLine: Sendable {
    /// The line's number in the file, from 1.
    var line: Int
    /// Why, for a person.
    var reason: String
    /// The line as it was in the file.
    var text: String
}

/// How the users file is laid out.
enum UsersFileFormat: String, Sendable, CaseIterable {
    /// `.csv` files and files whose first line has a comma are CSV; others are one user a line.
    case auto
    /// One user name per line.
    case lines
    /// CSV with a header naming a `user` column; every other column is a template parameter.
    case csv
}

/// The users file, read and checked in full before anything is sent, so the total is known and
/// bad lines are reported up front.
///
/// - Blank lines and lines starting with `#` are skipped (not rejected, not counted).
/// - Surrounding spaces and a trailing `\r` (CRLF files) are dropped.
/// - CSV is RFC 4180 on one line: fields separated by commas, optionally in double quotes with
///   `""` for a quote; a quoted field cannot span lines.
/// - A user named twice is rejected the second time (`duplicate of line N`): one file, one
///   notification per user.
struct UsersFile: Sendable {
    /// The lines to send, in file order.
    var recipients: [Recipient]
    /// The lines refused locally, in file order.
    var rejected: [RejectedLine]
    /// The CSV's parameter columns (empty for a plain list).
    var parameterColumns: [String]

    /// Reads `path`. Throws a ``CommandFailure`` (one line) when the file cannot be read or a
    /// CSV header has no `user` column; bad lines are ``rejected``, not thrown.
    static func read(path: String, format: UsersFileFormat) throws -> UsersFile {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw CommandFailure("cannot read the users file \(path): \(Self.reason(error))")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw CommandFailure("the users file \(path) is not UTF-8 text")
        }
        // "\r\n" is one Character in Swift: split on it and on "\n" alone, so CRLF files
        // have lines and line numbers match editors'.
        var lines = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" }
        if lines.last?.isEmpty == true { lines.removeLast() }
        let isCSV: Bool
        switch format {
        case .lines: isCSV = false
        case .csv: isCSV = true
        case .auto:
            let first = lines.first { !Self.isSkipped(Self.clean($0)) }.map(Self.clean) ?? ""
            isCSV = path.lowercased().hasSuffix(".csv") || first.contains(",")
        }
        return isCSV ? try csv(lines, path: path) : plain(lines)
    }

    /// One user name a line.
    static func plain(_ lines: [Substring]) -> UsersFile {
        var file = UsersFile(recipients: [], rejected: [], parameterColumns: [])
        file.recipients.reserveCapacity(lines.count)
        var firstLine: [String: Int] = [:]
        for (index, raw) in lines.enumerated() {
            let text = clean(raw)
            if isSkipped(text) { continue }
            file.add(Recipient(line: index + 1, user: text, parameters: [:]), raw: raw, firstLine: &firstLine)
        }
        return file
    }

    /// CSV with a header.
    static func csv(_ lines: [Substring], path: String) throws -> UsersFile {
        guard let headerIndex = lines.firstIndex(where: { !isSkipped(clean($0)) }) else {
            return UsersFile(recipients: [], rejected: [], parameterColumns: [])
        }
        let header: [String]
        do {
            header = try fields(clean(lines[headerIndex])).map { $0.trimmingCharacters(in: .whitespaces) }
        } catch {
            throw CommandFailure("the CSV header of \(path) (line \(headerIndex + 1)) is not valid: \(error.description)")
        }
        guard let userColumn = header.firstIndex(of: "user") else {
            throw CommandFailure(
                "the CSV header of \(path) (line \(headerIndex + 1)) has no \"user\" column; found: \(header.joined(separator: ", "))"
            )
        }
        if let empty = header.firstIndex(of: "") {
            throw CommandFailure("the CSV header of \(path) has an empty column name (column \(empty + 1))")
        }
        if let repeated = header.first(where: { name in header.filter { $0 == name }.count > 1 }) {
            throw CommandFailure("the CSV header of \(path) names column \"\(repeated)\" twice")
        }
        var file = UsersFile(recipients: [], rejected: [], parameterColumns: header.filter { $0 != "user" })
        file.recipients.reserveCapacity(lines.count)
        var firstLine: [String: Int] = [:]
        for index in lines.indices where index > headerIndex {
            let raw = lines[index]
            let text = clean(raw)
            if isSkipped(text) { continue }
            let values: [String]
            do {
                values = try fields(text)
            } catch {
                file.rejected.append(RejectedLine(line: index + 1, reason: "bad CSV: \(error.description)", text: String(raw)))
                continue
            }
            guard values.count == header.count else {
                file.rejected.append(
                    RejectedLine(
                        line: index + 1, reason: "bad CSV: \(values.count) fields; the header has \(header.count)",
                        text: String(raw)))
                continue
            }
            var parameters: [String: String] = [:]
            for (column, value) in zip(header, values) where column != "user" && !value.isEmpty {
                parameters[column] = value
            }
            let user = values[userColumn].trimmingCharacters(in: .whitespaces)
            file.add(Recipient(line: index + 1, user: user, parameters: parameters), raw: raw, firstLine: &firstLine)
        }
        return file
    }

    /// Adds `recipient` unless its name is invalid or already seen.
    mutating func add(_ recipient: Recipient, raw: Substring, firstLine: inout [String: Int]) {
        do {
            _ = try UserName.validated(recipient.user)
        } catch {
            let shown = recipient.user.isEmpty ? "an empty user name" : "bad user name \"\(recipient.user.prefix(80))\""
            rejected.append(RejectedLine(line: recipient.line, reason: "\(shown): \(error.message)", text: String(raw)))
            return
        }
        if let earlier = firstLine[recipient.user] {
            rejected.append(
                RejectedLine(
                    line: recipient.line, reason: "duplicate of line \(earlier) (\(recipient.user))", text: String(raw)))
            return
        }
        firstLine[recipient.user] = recipient.line
        recipients.append(recipient)
    }

    /// A line without its `\r` and surrounding spaces (tabs, Unicode space separators and the
    /// zero-width space: Foundation's `.whitespaces`, without its per-call cost on every line).
    static func clean(_ raw: Substring) -> String {
        var scalars = raw.unicodeScalars[...]
        if scalars.last == "\r" { scalars = scalars.dropLast() }
        func isSpace(_ scalar: Unicode.Scalar) -> Bool {
            scalar == "\t" || scalar == "\u{200B}" || scalar.properties.generalCategory == .spaceSeparator
        }
        while let first = scalars.first, isSpace(first) { scalars = scalars.dropFirst() }
        while let last = scalars.last, isSpace(last) { scalars = scalars.dropLast() }
        return String(String.UnicodeScalarView(scalars))
    }

    static func isSkipped(_ text: String) -> Bool { text.isEmpty || text.hasPrefix("#") }

    /// The fields of one CSV line.
    static func fields(_ line: String) throws(CommandFailure) -> [String] {
        var fields: [String] = []
        var field = ""
        var quoted = false
        var wasQuoted = false
        var iterator = line.makeIterator()
        var pending: Character? = nil
        while let character = pending ?? iterator.next() {
            pending = nil
            if quoted {
                if character == "\"" {
                    let next = iterator.next()
                    if next == "\"" {
                        field.append("\"")
                    } else {
                        quoted = false
                        pending = next
                    }
                } else {
                    field.append(character)
                }
                continue
            }
            switch character {
            case ",":
                fields.append(wasQuoted ? field : field.trimmingCharacters(in: .whitespaces))
                field = ""
                wasQuoted = false
            case "\"":
                guard field.trimmingCharacters(in: .whitespaces).isEmpty, !wasQuoted else {
                    throw CommandFailure("a quote inside an unquoted field")
                }
                field = ""
                quoted = true
                wasQuoted = true
            default:
                if wasQuoted {
                    guard character == " " else { throw CommandFailure("text after a closing quote") }
                } else {
                    field.append(character)
                }
            }
        }
        if quoted { throw CommandFailure("a quote is not closed (a field cannot span lines)") }
        fields.append(wasQuoted ? field : field.trimmingCharacters(in: .whitespaces))
        return fields
    }

    /// A file error as a short phrase (no stack, no type names).
    static func reason(_ error: any Error) -> String {
        let error = error as NSError
        if let underlying = error.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain,
            let code = POSIXErrorCode(rawValue: Int32(underlying.code))
        {
            return String(cString: strerror(code.rawValue))
        }
        switch error.code {
        case NSFileReadNoSuchFileError: return "no such file"
        case NSFileReadNoPermissionError: return "permission denied"
        default: return error.localizedDescription
        }
    }
}

/// The idempotency key of each line of a send.
///
/// `hs1-` and 43 characters of base64url: the SHA-256 of the request's shared part (content and
/// options, as sent), the run name, and the line's user and parameters. So:
///
/// - the same command run again derives the same keys, and the API answers the notifications
///   it already made instead of making new ones;
/// - editing the file (fixing a rejected line, adding users) changes only those lines' keys:
///   the rerun sends just them;
/// - other content or options, or another `--run-name`, is another send.
///
/// Keys belong to the API key that used them: a rerun must use the same API key.
struct SendKeys: Sendable {
    /// The digest of everything the lines share.
    let prefix: SHA256Digest

    /// Keys for a request whose shared JSON fragment is `shared`, under `runName`.
    init(shared: String, runName: String) {
        var hasher = SHA256()
        hasher.update(data: Data("heraldctl-send-v1\u{0}".utf8))
        hasher.update(data: Data(shared.utf8))
        hasher.update(data: Data("\u{0}\(runName)\u{0}".utf8))
        prefix = hasher.finalize()
    }

    /// The key of `recipient`.
    func key(for recipient: Recipient) -> String {
        var hasher = SHA256()
        prefix.withUnsafeBytes { hasher.update(bufferPointer: $0) }
        hasher.update(data: Data(recipient.user.utf8))
        for name in recipient.parameters.keys.sorted() {
            hasher.update(data: Data("\u{0}\(name)\u{1}\(recipient.parameters[name]!)".utf8))
        }
        return "hs1-" + Self.base64URL(hasher.finalize())
    }

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// `bytes` in base64url without padding (RFC 4648 §5), written directly: per line, Foundation's
    /// base64 and three `replacingOccurrences` were most of this command's CPU on a large file.
    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            for shift in [18, 12, 6, 0] { out.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
            index += 3
        }
        switch input.count - index {
        case 1:
            let chunk = UInt32(input[index]) << 16
            for shift in [18, 12] { out.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
        case 2:
            let chunk = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            for shift in [18, 12, 6] { out.append(alphabet[Int(chunk >> UInt32(shift) & 63)]) }
        default: break
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// The rejects file: a comment naming the users file, then one line per rejected line,
/// `LINE<TAB>REASON<TAB>TEXT` (tabs and newlines in the text replaced by spaces).
struct RejectsFile {
    let path: String
    let usersFile: String

    /// Removes a rejects file left by an earlier run (this run's rejects replace it).
    func clear() throws {
        do {
            if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        } catch {
            throw CommandFailure("cannot replace the rejects file \(path): \(UsersFile.reason(error))")
        }
    }

    /// Writes `lines` sorted by line number (nothing when empty).
    func write(_ lines: [RejectedLine]) throws {
        guard !lines.isEmpty else { return }
        var text = "# heraldctl send: lines of \(usersFile) not sent. line<TAB>reason<TAB>text\n"
        for line in lines.sorted(by: { $0.line < $1.line }) {
            let clean = { (value: String) in
                value.replacingOccurrences(of: "\t", with: " ").replacingOccurrences(of: "\r", with: "")
                    .replacingOccurrences(of: "\n", with: " ")
            }
            text += "\(line.line)\t\(clean(line.reason))\t\(clean(line.text))\n"
        }
        do {
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        } catch {
            throw CommandFailure("cannot write the rejects file \(path): \(UsersFile.reason(error))")
        }
    }
}

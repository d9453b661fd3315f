import Foundation

/// The queue's own schema, shipped inside the library as versioned SQL so the library
/// stands alone. Apply ``migrations`` in order, each in its own transaction, and record
/// the versions you applied, under a lock if several processes may migrate at once.
public enum QueueSchema {
    /// One versioned schema step.
    public struct Migration: Sendable, Hashable {
        /// Increasing from 1.
        public var version: Int
        /// A short name, e.g. `create_queue`.
        public var name: String
        /// The SQL to run (may hold several statements; run it as a simple query).
        public var sql: String
    }

    /// The name under which runners record these migrations.
    public static let component = "pgqueue"

    /// The claim table, `pgqueue.jobs`: it holds every job that is waiting or running
    /// (`available`, `running`, `retryable`) and no other, by its primary key `id`
    /// (``EnqueuedJob/id``, ``ClaimedJob/id``). A job that finished (`completed`, `discarded`,
    /// `cancelled`) has left it for good, in the statement that recorded its outcome. An
    /// application may join against it in its own SQL to ask, in the same statement as its own
    /// writes, whether a job it keeps the id of can still run:
    ///
    /// ```sql
    /// NOT EXISTS (SELECT 1 FROM pgqueue.jobs j WHERE j.id = my_rows.job_id)  -- the job is over
    /// ```
    ///
    /// Read it only that way: its other columns are the library's own business.
    public static let jobsTable = "pgqueue.jobs"

    /// The schema version this build of the library needs.
    public static var currentVersion: Int { migrations.last?.version ?? 0 }

    /// All schema steps, oldest first, read from the library's bundled `Schema/NNNN_name.sql`.
    public static let migrations: [Migration] = {
        guard
            let dir = Bundle.module.url(forResource: "Schema", withExtension: nil),
            let files = try? FileManager.default.contentsOfDirectory(at: dir, includingPropertiesForKeys: nil)
        else { return [] }
        return files.compactMap { url -> Migration? in
            let file = url.lastPathComponent
            guard file.hasSuffix(".sql"), let underscore = file.firstIndex(of: "_"),
                let version = Int(file[..<underscore]),
                let sql = try? String(contentsOf: url, encoding: .utf8)
            else { return nil }
            let name = String(file[file.index(after: underscore)...].dropLast(4))
            return Migration(version: version, name: name, sql: sql)
        }.sorted { $0.version < $1.version }
    }()
}

extension QueueSchema {
    /// Splits a SQL script into statements at top-level semicolons, skipping `--` and `/* */`
    /// comments and respecting quoted text, quoted identifiers and dollar-quoted bodies.
    /// PostgreSQL's extended protocol runs one statement at a time, so runners use this to
    /// apply a migration file statement by statement inside one transaction.
    public static func statements(in script: String) -> [String] {
        var statements: [String] = []
        var current = ""
        let chars = Array(script.unicodeScalars)
        var i = 0
        func flush() {
            let trimmed = current.trimmingCharacters(in: .whitespacesAndNewlines)
            if !trimmed.isEmpty { statements.append(trimmed) }
            current = ""
        }
        while i < chars.count {
            let c = chars[i]
            let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
            if c == "-" && next == "-" {
                while i < chars.count && chars[i] != "\n" { i += 1 }
                continue
            }
            if c == "/" && next == "*" {
                i += 2
                while i + 1 < chars.count && !(chars[i] == "*" && chars[i + 1] == "/") { i += 1 }
                i += 2
                continue
            }
            if c == "'" || c == "\"" {
                current.unicodeScalars.append(c)
                i += 1
                while i < chars.count {
                    current.unicodeScalars.append(chars[i])
                    if chars[i] == c {
                        if i + 1 < chars.count && chars[i + 1] == c {  // doubled quote
                            current.unicodeScalars.append(chars[i + 1])
                            i += 2
                            continue
                        }
                        i += 1
                        break
                    }
                    i += 1
                }
                continue
            }
            if c == "$" {
                // A dollar-quote tag: $$ or $tag$.
                var j = i + 1
                while j < chars.count,
                    chars[j] == "_" || chars[j].properties.isAlphabetic || (j > i + 1 && chars[j].properties.numericType != nil)
                {
                    j += 1
                }
                if j < chars.count && chars[j] == "$" {
                    let tag = String(String.UnicodeScalarView(chars[i...j]))
                    let tagScalars = Array(tag.unicodeScalars)
                    current += tag
                    i = j + 1
                    while i < chars.count {
                        if chars[i] == "$" && i + tagScalars.count <= chars.count
                            && Array(chars[i..<(i + tagScalars.count)]) == tagScalars
                        {
                            current += tag
                            i += tagScalars.count
                            break
                        }
                        current.unicodeScalars.append(chars[i])
                        i += 1
                    }
                    continue
                }
            }
            if c == ";" {
                flush()
                i += 1
                continue
            }
            current.unicodeScalars.append(c)
            i += 1
        }
        flush()
        return statements
    }
}

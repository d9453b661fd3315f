import Foundation
import Testing

/// The documentation's own rules: the README and `docs/architecture.md` stay short, no page
/// carries history (commit hashes, the word "round"), and every relative link resolves to a
/// file and, with a `#fragment`, to a heading of that file.
@Suite("Docs")
struct DocsTests {
    /// The repository's top folder.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("README.md is at most 12 KB")
    func readmeSize() throws {
        let size = try Data(contentsOf: Self.root.appendingPathComponent("README.md")).count
        #expect(size <= 12_288, "README.md is \(size) bytes")
    }

    @Test("docs/architecture.md is at most 40 KB")
    func architectureSize() throws {
        let size = try Data(contentsOf: Self.root.appendingPathComponent("docs/architecture.md")).count
        #expect(size <= 40_960, "docs/architecture.md is \(size) bytes")
    }

    @Test("no page holds a commit hash or the word round")
    func noHistory() throws {
        for page in try Self.historyFreePages() {
            let text = try Self.read(page)
            for (number, line, inFence) in MarkdownLines(text) {
                for hash in DocsRules.commitHashes(in: line, inFence: inFence) {
                    Issue.record("\(page):\(number): `\(hash)` looks like a commit hash")
                }
                if !inFence && DocsRules.saysRound(line) {
                    Issue.record("\(page):\(number): says \"round\": \(line)")
                }
            }
        }
    }

    @Test("every relative link resolves to a file and a heading")
    func linksResolve() throws {
        var anchors: [String: Set<String>] = [:]
        for page in try Self.linkedPages() {
            let pageURL = Self.root.appendingPathComponent(page)
            let text = try Self.read(page)
            for (number, line, inFence) in MarkdownLines(text) where !inFence {
                for target in DocsRules.linkTargets(in: line) {
                    let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                    let pathPart = String(parts[0]).removingPercentEncoding ?? String(parts[0])
                    let url =
                        pathPart.isEmpty
                        ? pageURL : pageURL.deletingLastPathComponent().appendingPathComponent(pathPart).standardized
                    var isFolder: ObjCBool = false
                    guard FileManager.default.fileExists(atPath: url.path, isDirectory: &isFolder) else {
                        Issue.record("\(page):\(number): \(target): no such file")
                        continue
                    }
                    guard parts.count == 2, !isFolder.boolValue, url.pathExtension == "md" else { continue }
                    if anchors[url.path] == nil {
                        let contents = try String(contentsOf: url, encoding: .utf8)
                        anchors[url.path] = DocsRules.anchors(of: contents)
                    }
                    let fragment = String(parts[1]).removingPercentEncoding ?? String(parts[1])
                    if !(anchors[url.path] ?? []).contains(fragment) {
                        Issue.record("\(page):\(number): \(target): no heading #\(fragment) in \(url.lastPathComponent)")
                    }
                }
            }
        }
    }

    @Test("the rules catch what they are for and spare examples")
    func rulesThemselves() {
        #expect(DocsRules.commitHashes(in: "see `abc1234` for it", inFence: false) == ["abc1234"])
        #expect(DocsRules.commitHashes(in: "fixed in abc1234.", inFence: false) == ["abc1234"])
        #expect(DocsRules.commitHashes(in: "id 6f1c2a3e-41b2-4c55-9d1e-0a2b3c4d5e6f", inFence: false).isEmpty)
        #expect(DocsRules.commitHashes(in: "handle 2ED2B4C2F4A1B3", inFence: false).isEmpty)
        #expect(DocsRules.commitHashes(in: "`1000000` jobs, 0001_users.sql", inFence: false).isEmpty)
        #expect(DocsRules.commitHashes(in: "6f1c2a3e41b2", inFence: true).isEmpty)
        #expect(DocsRules.saysRound("two round trips"))
        #expect(DocsRules.saysRound("The Sixth Round:"))
        #expect(!DocsRules.saysRound("around the arenas, rounded down"))
        #expect(!DocsRules.saysRound("the `--rounds` option"))
        #expect(
            DocsRules.linkTargets(in: "[a](docs/x.md#y) `[b](c.md)` [w](https://e.com) [s](#z \"t\")") == [
                "docs/x.md#y", "#z",
            ])
        #expect(DocsRules.slug("Sends: states, retries and `Retry-After`") == "sends-states-retries-and-retry-after")
        #expect(DocsRules.anchors(of: "# A\n```\n# not\n```\n## A\n") == ["a", "a-1"])
    }

    /// README.md and every Markdown file under docs/.
    static func historyFreePages() throws -> [String] {
        let docs = try markdown(under: "docs")
        return ["README.md"] + docs
    }

    /// The pages whose links are checked.
    static func linkedPages() throws -> [String] {
        var pages = try historyFreePages()
        if FileManager.default.fileExists(atPath: root.appendingPathComponent("deploy/README.md").path) {
            pages.append("deploy/README.md")
        }
        return pages
    }

    static func markdown(under folder: String) throws -> [String] {
        let base = root.appendingPathComponent(folder)
        guard let walker = FileManager.default.enumerator(atPath: base.path) else { return [] }
        return walker.compactMap { $0 as? String }.filter { $0.hasSuffix(".md") }.sorted().map { "\(folder)/\($0)" }
    }

    static func read(_ page: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(page), encoding: .utf8)
    }
}

/// A page's lines, numbered from 1, each with whether it is inside (or opens or closes) a
/// fenced code block.
struct MarkdownLines: Sequence {
    let text: String
    init(_ text: String) { self.text = text }

    func makeIterator() -> some IteratorProtocol<(Int, String, Bool)> {
        var fence: String?
        var number = 0
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).makeIterator()
        return AnyIterator {
            guard let raw = lines.next() else { return nil }
            number += 1
            let line = String(raw)
            let trimmed = line.drop { $0 == " " }
            for marker in ["```", "~~~"] where trimmed.hasPrefix(marker) {
                if fence == nil {
                    fence = marker
                    return (number, line, true)
                } else if fence == marker {
                    fence = nil
                    return (number, line, true)
                }
            }
            return (number, line, fence != nil)
        }
    }
}

/// What the docs tests look for in a line of Markdown.
enum DocsRules {
    /// Commit hashes in `line`: a code span holding only 7 to 40 lower-case hex digits (not a
    /// plain decimal number), or, outside fenced code blocks, a bare word of 7 to 40 lower-case
    /// hex digits with at least one digit and one letter. Words are split at spaces, slashes,
    /// brackets, quotes, commas and the like, but not at `-`, `_`, `.` or `:` inside them, so the
    /// groups of a UUID, a file name or a longer hex device token are never a word of their own.
    /// Fenced code blocks (request and answer examples with ids and tokens) are not checked.
    static func commitHashes(in line: String, inFence: Bool) -> [String] {
        guard !inFence else { return [] }
        var found: [String] = []
        for span in codeSpans(in: line) where span.count >= 7 && span.count <= 40 && span.allSatisfy(isHex) {
            if !span.allSatisfy(\.isNumber) { found.append(span) }
        }
        let separators = Set(" \t()[]{}<>,;\"'`*|!?/=#@")
        for raw in line.split(whereSeparator: { separators.contains($0) }) {
            let word = raw.trimmingCharacters(in: CharacterSet(charactersIn: ".:"))
            guard word.count >= 7, word.count <= 40, word.allSatisfy(isHex) else { continue }
            if word.contains(where: \.isNumber) && word.contains(where: \.isLetter) && !found.contains(word) {
                found.append(word)
            }
        }
        return found
    }

    /// Whether the line says "round" or "rounds" as a whole word (any case) outside code spans:
    /// the word of a tuning diary. A command-line option in a code span (`--rounds`) is code.
    static func saysRound(_ line: String) -> Bool {
        let prose = withoutCodeSpans(line)
        return prose.split(whereSeparator: { !$0.isLetter }).contains { ["round", "rounds"].contains($0.lowercased()) }
    }

    /// The targets of the line's relative links, `[text](target)` outside code spans and
    /// `[name]: target` definitions; web and mail links left out.
    static func linkTargets(in line: String) -> [String] {
        let prose = withoutCodeSpans(line)
        var targets: [String] = []
        var rest = prose[...]
        while let open = rest.range(of: "](") {
            let after = rest[open.upperBound...]
            guard let close = after.firstIndex(of: ")") else { break }
            var target = after[..<close].trimmingCharacters(in: .whitespaces)
            if let space = target.firstIndex(of: " ") { target = String(target[..<space]) }
            target = target.trimmingCharacters(in: CharacterSet(charactersIn: "<>"))
            targets.append(target)
            rest = after[close...]
        }
        let trimmed = prose.trimmingCharacters(in: .whitespaces)
        if trimmed.hasPrefix("["), let end = trimmed.range(of: "]: ") {
            let target = trimmed[end.upperBound...].split(separator: " ").first.map(String.init) ?? ""
            targets.append(target)
        }
        return targets.filter { !$0.isEmpty && !$0.contains("://") && !$0.hasPrefix("mailto:") }
    }

    /// The fragments a page's headings (and `id`/`name` attributes) answer to, as GitHub makes
    /// them: lower case, spaces to `-`, every character but letters, digits, `-` and `_`
    /// dropped, a repeated slug numbered `-1`, `-2`, …
    static func anchors(of text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var anchors: Set<String> = []
        for (_, line, inFence) in MarkdownLines(text) where !inFence {
            for attribute in ["id=\"", "name=\""] {
                var rest = line[...]
                while let start = rest.range(of: attribute) {
                    let value = rest[start.upperBound...].prefix { $0 != "\"" }
                    anchors.insert(String(value))
                    rest = rest[start.upperBound...]
                }
            }
            let hashes = line.prefix { $0 == "#" }.count
            guard (1...6).contains(hashes), line.dropFirst(hashes).first == " " else { continue }
            var title = line.dropFirst(hashes).trimmingCharacters(in: .whitespaces)
            while title.hasSuffix("#") { title = String(title.dropLast()).trimmingCharacters(in: .whitespaces) }
            let base = slug(title)
            let count = seen[base, default: 0]
            seen[base] = count + 1
            anchors.insert(count == 0 ? base : "\(base)-\(count)")
        }
        return anchors
    }

    /// A heading's GitHub slug.
    static func slug(_ title: String) -> String {
        String(
            title.lowercased().compactMap { character -> Character? in
                if character == " " { return "-" }
                if character.isLetter || character.isNumber || character == "-" || character == "_" { return character }
                return nil
            })
    }

    private static func isHex(_ character: Character) -> Bool {
        ("0"..."9").contains(character) || ("a"..."f").contains(character)
    }

    /// The contents of the line's code spans (`` `…` ``).
    private static func codeSpans(in line: String) -> [String] {
        let parts = line.split(separator: "`", omittingEmptySubsequences: false)
        return stride(from: 1, to: parts.count - 1, by: 2).map { String(parts[$0]) }
    }

    /// The line with its code spans taken out.
    private static func withoutCodeSpans(_ line: String) -> String {
        let parts = line.split(separator: "`", omittingEmptySubsequences: false)
        return stride(from: 0, to: parts.count, by: 2).map { String(parts[$0]) }.joined(separator: " ")
    }
}

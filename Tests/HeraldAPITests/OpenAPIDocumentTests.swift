import Foundation
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@testable import HeraldAPI

/// `openapi.yaml` cannot drift from the code: the document served at `/openapi.yaml` must
/// describe exactly the routes of ``APIRoutes/all`` (the table the application registers
/// from), each with exactly the statuses the table says the route can answer, and each request
/// schema must require exactly the fields the decoder requires.
@Suite("OpenAPI document", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct OpenAPIDocumentTests {
    static let methods = ["get", "post", "put", "delete", "patch", "head", "options"]

    @Test("every route, status and required field is documented, and nothing else")
    func noDrift() async throws {
        try await APIHarness.with { api async throws in
            let response = try await api.send(.get, "/openapi.yaml")
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/yaml")
            let document = try #require(try MiniYAML.parse(response.text) as? [String: Any])
            #expect(document["openapi"] as? String == "3.1.0")
            let paths = try #require(document["paths"] as? [String: Any])
            let schemas = try #require((document["components"] as? [String: Any])?["schemas"] as? [String: Any])

            var documented = Set<String>()
            for (path, value) in paths {
                let operations = try #require(value as? [String: Any], "\(path)")
                for method in operations.keys where Self.methods.contains(method) {
                    documented.insert("\(method.uppercased()) \(path)")
                }
            }
            let served = Set(APIRoutes.all.map { "\($0.method.rawValue) \($0.path)" })
            #expect(
                documented == served,
                "documented but not served: \(documented.subtracting(served)); served but not documented: \(served.subtracting(documented))"
            )

            for route in APIRoutes.all {
                let operation = (paths[route.path] as? [String: Any])?[route.method.rawValue.lowercased()] as? [String: Any]
                guard let operation else { continue }
                let responses = (operation["responses"] as? [String: Any]) ?? [:]
                let statuses = Set(responses.keys.compactMap(Int.init))
                #expect(
                    statuses == route.statuses,
                    "\(route.method) \(route.path): documented \(statuses.sorted()), code \(route.statuses.sorted())")
                if route.path.contains("{id}") {
                    let parameters = (operation["parameters"] as? [Any] ?? []).compactMap { $0 as? [String: Any] }
                    #expect(
                        parameters.contains { $0["name"] as? String == "id" && $0["in"] as? String == "path" }, "\(route.path)")
                }
                let body = (operation["requestBody"] as? [String: Any])?["content"] as? [String: Any]
                let reference = ((body?["application/json"] as? [String: Any])?["schema"] as? [String: Any])?["$ref"] as? String
                if let expected = route.body {
                    #expect(reference == "#/components/schemas/\(expected.schema)", "\(route.method) \(route.path)")
                    let schema = schemas[expected.schema] as? [String: Any]
                    #expect(schema != nil, "schema \(expected.schema)")
                    let required = (schema?["required"] as? [Any] ?? []).compactMap { $0 as? String }
                    #expect(Set(required) == Set(expected.required), "\(expected.schema).required")
                } else {
                    #expect(reference == nil, "\(route.method) \(route.path) documents a body the code does not read")
                }
            }
        }
    }

    @Test("the YAML reader reads the subset the document uses")
    func reader() throws {
        let text = """
            a: 1
            'b:c':
              - name: x
                in: path
              - plain
            d:
              e: [f, 'g h', {k: []}]
              $ref: '#/x/y'
              quoted: 'it''s'
            """
        let value = try #require(try MiniYAML.parse(text) as? [String: Any])
        #expect(value["a"] as? String == "1")
        let list = try #require(value["b:c"] as? [Any])
        #expect((list[0] as? [String: Any])?["in"] as? String == "path")
        #expect(list[1] as? String == "plain")
        let d = try #require(value["d"] as? [String: Any])
        #expect((d["e"] as? [Any])?.compactMap { $0 as? String } == ["f", "g h", "{k: []}"])
        #expect(d["$ref"] as? String == "#/x/y")
        #expect(d["quoted"] as? String == "it's")
        #expect(throws: MiniYAML.Failure.self) { try MiniYAML.parse("a: 'the caller's'") }
        #expect(throws: MiniYAML.Failure.self) { try MiniYAML.parse("a: two: colons") }
    }
}

/// A reader for the YAML subset `openapi.yaml` is written in: block mappings and sequences by
/// indentation, plain and single-quoted scalars, and one-line flow sequences (`[a, b]`, whose
/// `{…}` items stay text). No anchors, multi-line scalars or comments after values.
enum MiniYAML {
    struct Failure: Error, CustomStringConvertible { var description: String }

    private struct Line {
        var indent: Int
        var text: Substring
        var number: Int
    }

    static func parse(_ text: String) throws -> Any {
        var lines: [Line] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let content = raw.drop(while: { $0 == " " })
            if content.isEmpty || content.hasPrefix("#") { continue }
            lines.append(Line(indent: raw.count - content.count, text: content, number: number + 1))
        }
        guard let first = lines.first else { return [String: Any]() }
        var index = 0
        let value = try block(&lines, &index, indent: first.indent)
        guard index == lines.count else { throw Failure(description: "line \(lines[index].number): unexpected indentation") }
        return value
    }

    private static func block(_ lines: inout [Line], _ index: inout Int, indent: Int) throws -> Any {
        if lines[index].text.hasPrefix("- ") || lines[index].text == "-" {
            var items: [Any] = []
            while index < lines.count, lines[index].indent == indent, lines[index].text.hasPrefix("-") {
                let rest = lines[index].text.dropFirst(2)
                if key(of: rest) != nil {
                    // `- key: value` opens a mapping whose further keys sit two columns in.
                    lines[index] = Line(indent: indent + 2, text: rest, number: lines[index].number)
                    items.append(try block(&lines, &index, indent: indent + 2))
                } else {
                    items.append(try scalar(rest))
                    index += 1
                }
            }
            return items
        }
        var map: [String: Any] = [:]
        while index < lines.count, lines[index].indent == indent {
            let line = lines[index]
            guard let (key, value) = key(of: line.text) else {
                throw Failure(description: "line \(line.number): expected `key:`")
            }
            index += 1
            if !value.isEmpty {
                map[key] = try scalar(value)
            } else if index < lines.count, lines[index].indent > indent {
                map[key] = try block(&lines, &index, indent: lines[index].indent)
            } else {
                map[key] = ""
            }
        }
        return map
    }

    /// `key: value` or `key:` (plain or single-quoted key).
    private static func key(of text: Substring) -> (String, Substring)? {
        if text.hasPrefix("'") {
            guard let close = text.dropFirst().firstIndex(of: "'") else { return nil }
            let key = String(text[text.index(after: text.startIndex)..<close])
            let rest = text[text.index(after: close)...]
            guard rest.hasPrefix(":") else { return nil }
            return (key, rest.dropFirst().drop(while: { $0 == " " }))
        }
        if text.hasPrefix("[") || text.hasPrefix("{") { return nil }
        if let range = text.range(of: ": ") {
            return (String(text[..<range.lowerBound]), text[range.upperBound...].drop(while: { $0 == " " }))
        }
        if text.hasSuffix(":") { return (String(text.dropLast()), "") }
        return nil
    }

    /// A scalar or flow sequence. What a real YAML parser would read otherwise (a quote left
    /// single inside a quoted scalar, `: ` or ` #` in a plain one) is an error, so the document
    /// stays valid YAML for every tool, not only for this reader.
    private static func scalar(_ text: Substring) throws -> Any {
        let text = text.trimmingCharacters(in: .whitespaces)
        if text.hasPrefix("'") {
            let inner = text.dropFirst().dropLast()
            guard text.count >= 2, text.hasSuffix("'"), !inner.replacingOccurrences(of: "''", with: "").contains("'")
            else { throw Failure(description: "a single-quoted scalar must double its inner quotes: \(text)") }
            return String(inner).replacingOccurrences(of: "''", with: "'")
        }
        if text.hasPrefix("["), text.hasSuffix("]") {
            var items: [Any] = []
            var depth = 0
            var current = ""
            var quoted = false
            for character in text.dropFirst().dropLast() {
                if character == "'" { quoted.toggle() }
                if !quoted, character == "{" || character == "[" { depth += 1 }
                if !quoted, character == "}" || character == "]" { depth -= 1 }
                if !quoted, depth == 0, character == "," {
                    items.append(try scalar(Substring(current)))
                    current = ""
                } else {
                    current.append(character)
                }
            }
            if !current.trimmingCharacters(in: .whitespaces).isEmpty { items.append(try scalar(Substring(current))) }
            return items
        }
        if text.hasPrefix("{"), text.hasSuffix("}") { return text }  // a flow mapping, kept as text
        if text.contains(": ") || text.contains(" #") || text.hasSuffix(":") || text.hasPrefix("\"") {
            throw Failure(description: "quote this plain scalar: \(text)")
        }
        return text
    }
}

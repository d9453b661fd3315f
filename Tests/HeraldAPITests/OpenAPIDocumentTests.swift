import Foundation
import HeraldDomain
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing
import Yams

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
            let document = try #require(try Self.load(response.text) as? [String: Any])
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

    @Test("Error.code lists exactly the codes of DomainError.Code and APIError.Code, which do not overlap")
    func errorCodes() async throws {
        try await APIHarness.with { api async throws in
            let response = try await api.send(.get, "/openapi.yaml")
            let document = try #require(try Self.load(response.text) as? [String: Any])
            let schemas = (document["components"] as? [String: Any])?["schemas"] as? [String: Any]
            let code = ((schemas?["Error"] as? [String: Any])?["properties"] as? [String: Any])?["code"] as? [String: Any]
            let documented = try #require(code?["enum"] as? [Any], "Error.code has no enum").compactMap { $0 as? String }
            #expect(documented.count == Set(documented).count, "a code is listed twice")
            let domain = Set(DomainError.Code.all.map(\.rawValue))
            let http = Set(APIError.Code.all.map(\.rawValue))
            #expect(domain.count == DomainError.Code.all.count && http.count == APIError.Code.all.count)
            #expect(domain.isDisjoint(with: http), "in both catalogues: \(domain.intersection(http).sorted())")
            let catalogued = domain.union(http)
            #expect(
                Set(documented) == catalogued,
                "documented, not in code: \(Set(documented).subtracting(catalogued).sorted()); in code, not documented: \(catalogued.subtracting(documented).sorted())"
            )
            #expect(catalogued.contains("slot_too_far_ahead") && catalogued.contains("rate_limited"))
        }
    }

    /// The document as YAML reads it, every scalar as text (the drift check compares
    /// status codes, names and references as strings).
    static func load(_ text: String) throws -> Any? {
        try Yams.load(yaml: text, .basic)
    }

    @Test("YAML is read as the drift check expects, and what is not valid YAML is refused")
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
        let value = try #require(try Self.load(text) as? [String: Any])
        #expect(value["a"] as? String == "1")
        let list = try #require(value["b:c"] as? [Any])
        #expect((list[0] as? [String: Any])?["in"] as? String == "path")
        #expect(list[1] as? String == "plain")
        let d = try #require(value["d"] as? [String: Any])
        let e = try #require(d["e"] as? [Any])
        #expect(e.compactMap { $0 as? String } == ["f", "g h"])
        #expect(((e.last as? [String: Any])?["k"] as? [Any])?.isEmpty == true, "a flow mapping inside a flow sequence")
        #expect(d["$ref"] as? String == "#/x/y")
        #expect(d["quoted"] as? String == "it's")
        #expect(throws: YamlError.self) { try Self.load("a: 'the caller's'") }
        #expect(throws: YamlError.self) { try Self.load("a: two: colons") }
    }
}

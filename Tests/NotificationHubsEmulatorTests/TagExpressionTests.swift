import NotificationHubsEmulator
import Testing

/// The tag-expression evaluator on its own (reference §4).
@Suite("Tag expressions")
struct TagExpressionTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var expression: String
        var tags: Set<String>
        var matches: Bool
        var testDescription: String { "\(expression) on \(tags.sorted()) → \(matches)" }
    }

    static let evaluations: [Case] = [
        Case(expression: "a", tags: ["a"], matches: true),
        Case(expression: "a", tags: ["b"], matches: false),
        Case(expression: "a", tags: [], matches: false),
        Case(expression: "a || b", tags: ["b"], matches: true),
        Case(expression: "a||b", tags: ["c"], matches: false),
        Case(expression: "a && b", tags: ["a"], matches: false),
        Case(expression: "a&&b", tags: ["a", "b"], matches: true),
        Case(expression: "!a", tags: [], matches: true),
        Case(expression: "!a", tags: ["a"], matches: false),
        Case(expression: "!!a", tags: ["a"], matches: true),
        // && binds tighter than ||.
        Case(expression: "a || b && c", tags: ["a"], matches: true),
        Case(expression: "a || b && c", tags: ["b"], matches: false),
        Case(expression: "a && b || c", tags: ["c"], matches: true),
        Case(expression: "a && b || c", tags: ["a"], matches: false),
        // Parentheses override it.
        Case(expression: "(a || b) && c", tags: ["a"], matches: false),
        Case(expression: "(a || b) && c", tags: ["b", "c"], matches: true),
        Case(expression: "a && (b || c)", tags: ["a", "c"], matches: true),
        // ! binds tighter than &&.
        Case(expression: "!a && b", tags: ["b"], matches: true),
        Case(expression: "!a && b", tags: ["a", "b"], matches: false),
        Case(expression: "!(a && b)", tags: ["a", "b"], matches: false),
        Case(expression: "!(a && b)", tags: ["a"], matches: true),
        Case(expression: "  ( follows_RedSox || follows_Cardinals )  &&  location_Boston ", tags: ["follows_Cardinals", "location_Boston"], matches: true),
        Case(expression: "(follows_RedSox || follows_Cardinals) && location_Boston", tags: ["follows_RedSox"], matches: false),
        // Tag characters and built-ins.
        Case(expression: "username:alice || from:bob", tags: ["from:bob"], matches: true),
        Case(expression: "a-b_c@d#e.f:g", tags: ["a-b_c@d#e.f:g"], matches: true),
        Case(expression: "$InstallationId:{69ddbc47-a1b2} || $UserId:{u=1}", tags: ["$UserId:{u=1}"], matches: true),
        Case(expression: "$InstallationId:{x} && tag", tags: ["$InstallationId:{x}"], matches: false),
        Case(expression: "Straße", tags: ["Straße"], matches: true),
        // Case-sensitive.
        Case(expression: "Alice", tags: ["alice"], matches: false),
    ]

    @Test(arguments: evaluations)
    func evaluates(_ c: Case) throws {
        let expression = try TagExpression(c.expression)
        #expect(expression.matches(c.tags) == c.matches)
    }

    struct Limit: CustomTestStringConvertible, Sendable {
        var expression: String
        var valid: Bool
        var testDescription: String { "\(expression.prefix(50)) valid=\(valid)" }
    }

    static func ors(_ n: Int) -> String { (1...n).map { "t\($0)" }.joined(separator: " || ") }
    static func ands(_ n: Int) -> String { (1...n).map { "t\($0)" }.joined(separator: " && ") }

    static let limits: [Limit] = [
        Limit(expression: ors(20), valid: true),
        Limit(expression: ors(21), valid: false),
        Limit(expression: "(" + ors(20) + ")", valid: true),
        Limit(expression: ands(6), valid: true),
        Limit(expression: ands(7), valid: false),
        Limit(expression: ors(6) + " && x", valid: false),
        Limit(expression: ors(5) + " && x", valid: true),
        Limit(expression: "!" + ors(7), valid: false),
        Limit(expression: "!" + ors(6), valid: true),
        Limit(expression: "a || a || a || a || a || a || a", valid: true),
        Limit(expression: String(repeating: "x", count: 120), valid: true),
        Limit(expression: String(repeating: "x", count: 121), valid: false),
        // Syntax errors.
        Limit(expression: "", valid: false),
        Limit(expression: "   ", valid: false),
        Limit(expression: "a &&", valid: false),
        Limit(expression: "|| a", valid: false),
        Limit(expression: "a & b", valid: false),
        Limit(expression: "a | b", valid: false),
        Limit(expression: "(a || b", valid: false),
        Limit(expression: "a || b)", valid: false),
        Limit(expression: "a b", valid: false),
        Limit(expression: "a,b", valid: false),
        Limit(expression: "a || tag with space", valid: false),
        Limit(expression: "$Other:{x}", valid: false),
        Limit(expression: "$UserId:{}", valid: false),
        Limit(expression: "()", valid: false),
    ]

    @Test(arguments: limits)
    func limitsAndSyntax(_ l: Limit) {
        let parsed = try? TagExpression(l.expression)
        #expect((parsed != nil) == l.valid)
    }

    @Test func metadata() throws {
        let e = try TagExpression("(a || b) && !a")
        #expect(e.tags == ["a", "b"])
        #expect(e.tagOccurrences == 3)
        #expect(!e.usesOnlyOr)
        #expect(!e.matchesUntagged)
        #expect(try TagExpression("!x").matchesUntagged)
        #expect(try TagExpression("x || y").usesOnlyOr)
    }

    @Test func tagValidation() throws {
        try TagExpression.validateTag("username:alice")
        try TagExpression.validateTag("$InstallationId:{abc-123}")
        #expect(throws: TagExpressionError.self) { try TagExpression.validateTag("has space") }
        #expect(throws: TagExpressionError.self) { try TagExpression.validateTag(String(repeating: "a", count: 121)) }
        #expect(throws: TagExpressionError.self) { try TagExpression.validateTag("a,b") }
        #expect(throws: TagExpressionError.self) { try TagExpression.validateTag("") }
    }
}

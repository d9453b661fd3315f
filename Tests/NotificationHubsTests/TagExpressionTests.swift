import Testing

@testable import NotificationHubs

@Suite("Tags and tag expressions")
struct TagExpressionTests {
    @Test(
        "Valid tags",
        arguments: [
            "a", "username:alice", "from:bob@example.com", "#hash", "under_score", "dash-ed", "dot.ted", "Üñîçødé",
            "$InstallationId:{69ddbc47-0a71-4d9c-9d81-6a0fb7e7f5e5}", "$UserId:{alice@example.com}", "$UserId:{a=b}",
            "$installationid:{x}", String(repeating: "x", count: 120),
        ])
    func validTags(_ tag: String) {
        #expect(TagExpression.isValidTag(tag))
    }

    @Test(
        "Invalid tags",
        arguments: [
            "", "with space", "comma,tag", "a&b", "a|b", "(a)", "!a", "slash/tag", "quote'", "a=b", "$Other:{x}",
            "$UserId:{}", "$UserId:{a b}", "$UserId:x", String(repeating: "x", count: 121), "emoji😀",
        ])
    func invalidTags(_ tag: String) {
        #expect(!TagExpression.isValidTag(tag))
        #expect(throws: NotificationHubsError.self) { try TagExpression.validateTag(tag) }
    }

    @Test(
        "Valid expressions and their tag counts",
        arguments: [
            ("a", 1),
            ("a||b", 2),
            ("a || b || c", 3),
            ("(follows_RedSox || follows_Cardinals) && location_Boston", 3),
            ("!a", 1),
            ("a && !b", 2),
            ("((a))", 1),
            ("(a||b)||(c||d)", 4),
            ("$InstallationId:{x} || $UserId:{y}", 2),
            ("(user:42) && myTemplate", 2),
        ])
    func validExpressions(_ expression: String, _ count: Int) throws {
        #expect(try TagExpression.validate(expression) == count)
    }

    @Test(
        "Malformed expressions",
        arguments: [
            "", "   ", "a ||", "|| a", "a && && b", "(a", "a)", "a | b", "a & b", "a b", "()", "!", "a !b", "a||bad tag",
        ])
    func malformed(_ expression: String) {
        #expect(throws: NotificationHubsError.self) { try TagExpression.validate(expression) }
    }

    @Test("OR-only expressions allow 20 tags, others 6")
    func limits() throws {
        let twenty = (1...20).map { "t\($0)" }
        #expect(try TagExpression.validate(twenty.joined(separator: "||")) == 20)
        #expect(throws: NotificationHubsError.self) {
            try TagExpression.validate((twenty + ["t21"]).joined(separator: "||"))
        }
        #expect(try TagExpression.validate("a && b && c && d && e && f") == 6)
        #expect(throws: NotificationHubsError.self) { try TagExpression.validate("a && b && c && d && e && f && g") }
        #expect(throws: NotificationHubsError.self) { try TagExpression.validate("a || b || c || d || e || f || !g") }
        #expect(try TagExpression.validate("(a || b || c || d || e) && f") == 6)
    }

    @Test("A tag list is joined with || and no spaces")
    func orJoin() throws {
        #expect(try TagExpression.or(["username:alice", "from:bob"]) == "username:alice||from:bob")
        #expect(throws: NotificationHubsError.self) { try TagExpression.or([]) }
        #expect(throws: NotificationHubsError.self) { try TagExpression.or((1...21).map { "t\($0)" }) }
        #expect(throws: NotificationHubsError.self) { try TagExpression.or(["ok", "not ok"]) }
    }

    @Test("Splitting N tags gives ≤20-tag OR expressions covering each tag once")
    func splitting() throws {
        let tags = (1...45).map { "user:\($0)" }
        let expressions = try TagExpression.orExpressions(for: tags + ["user:3"])
        #expect(expressions.count == 3)
        let parts = expressions.map { $0.split(separator: "|", omittingEmptySubsequences: true).map(String.init) }
        #expect(parts.map(\.count) == [20, 20, 5])
        #expect(parts.flatMap { $0 } == tags)
        for expression in expressions {
            #expect(try TagExpression.validate(expression) <= 20)
        }
        #expect(try TagExpression.orExpressions(for: []).isEmpty)
        #expect(try TagExpression.orExpressions(for: tags, maxTagsPerExpression: 10).count == 5)
        #expect(throws: NotificationHubsError.self) { try TagExpression.orExpressions(for: tags, maxTagsPerExpression: 21) }
        #expect(throws: NotificationHubsError.self) { try TagExpression.orExpressions(for: ["bad tag"]) }
    }

    @Test("Registrations carry at most 60 tags")
    func registrationTags() throws {
        try TagExpression.validateRegistrationTags((1...60).map { "t\($0)" })
        #expect(throws: NotificationHubsError.self) {
            try TagExpression.validateRegistrationTags((1...61).map { "t\($0)" })
        }
    }

    @Test("Send targets produce the tags header")
    func targets() throws {
        #expect(try SendTarget.allDevices.tagHeader(operation: .send) == nil)
        #expect(try SendTarget.tag("a").tagHeader(operation: .send) == "a")
        #expect(try SendTarget.tags(["a", "b"]).tagHeader(operation: .send) == "a||b")
        #expect(try SendTarget.installation("i-1").tagHeader(operation: .send) == "$InstallationId:{i-1}")
        #expect(try SendTarget.user("u@x").tagHeader(operation: .send) == "$UserId:{u@x}")
        #expect(try SendTarget.device(handle: "h").tagHeader(operation: .send) == nil)
        #expect(throws: NotificationHubsError.self) { try SendTarget.tagExpression("a &&").tagHeader(operation: .send) }
    }
}

import Foundation
import NotificationHubsEmulator
import Testing

/// Registration listings as the service pages them (reference §2.5): installation-backed
/// registrations included, opaque percent-encoded continuation tokens, `$top` capped at 100.
@Suite("Listing pages")
struct ListingTests {
    static let json = [("Content-Type", "application/json")]

    /// Pages through `path` with `$top=100`; returns every `<RegistrationId>` and the tokens seen.
    func pageThrough(
        _ h: Harness, _ path: String, parameter: String = "continuationtoken", reencode: Bool = false
    ) async throws -> (ids: [String], tokens: [String], entries: [String]) {
        var ids: [String] = []
        var entries: [String] = []
        var tokens: [String] = []
        var token: String?
        repeat {
            var query = "$top=100"
            if let token {
                // The JS SDK's URLSearchParams encodes the already encoded token once more.
                query += "&\(parameter)=" + (reencode ? token.replacingOccurrences(of: "%", with: "%25") : token)
            }
            let page = try await h.call(.GET, path, query: query)
            #expect(page.status == 200, "\(page.body)")
            let pageEntries = page.body.all(between: "<entry", "</entry>")
            #expect(pageEntries.count <= 100)
            entries += pageEntries
            ids += page.body.all(between: "<RegistrationId>", "</RegistrationId>")
            token = page.header("X-MS-ContinuationToken")
            if let token { tokens.append(token) }
        } while token != nil && tokens.count < 10
        return (ids, tokens, entries)
    }

    @Test("250 registrations and installation registrations, pages of 100: each exactly once, installations as the service shows them")
    func pagesOf100() async throws {
        try await Harness.with { h in
            var expected: Set<String> = []
            for n in 0..<150 {
                expected.insert(try await h.register(Entry.gcm("gcm-\(n)", tags: "all,r\(n)")))
            }
            for n in 0..<50 {
                let installation = """
                    {"installationId":"inst-\(n)","userId":"user-\(n)","platform":"fcmv1","pushChannel":"fcm-\(n)","tags":["all"],
                     "templates":{"greeting":{"body":"{\\"message\\":{\\"data\\":{\\"m\\":\\"$(m)\\"}}}","tags":["all"]}}}
                    """
                #expect(try await h.call(.PUT, "/installations/inst-\(n)", headers: Self.json, body: installation).status == 200)
            }
            let inspected = try await h.inspect(.GET, "/registrations").jsonArray
            expected.formUnion(inspected.compactMap { $0["registrationId"] as? String })
            #expect(expected.count == 250)

            let all = try await pageThrough(h, "/registrations")
            #expect(all.ids.count == 250)
            #expect(Set(all.ids) == expected)
            #expect(all.tokens.count == 2)
            for token in all.tokens {
                #expect(token.range(of: "^[A-Za-z0-9%]+$", options: .regularExpression) != nil)
                #expect(token.contains("%3D") || token.contains("%2B") || token.contains("%2F") || Data(base64Encoded: token) != nil)
                #expect(Int(token) == nil && !token.hasPrefix("c"))
            }

            // An installation shows as a native registration tagged $InstallationId:{…},$UserId:{…}
            // plus its tags, and one template registration per template carrying the template name.
            let native = all.entries.filter { $0.contains("<Tags>$InstallationId:{inst-7},$UserId:{user-7},all</Tags>") }
            #expect(native.count == 1)
            #expect(native.first?.contains("<FcmV1RegistrationDescription") == true)
            let template = all.entries.filter { $0.contains("$InstallationId:{inst-7}") && $0.contains("<FcmV1TemplateRegistrationDescription") }
            #expect(template.count == 1)
            #expect(template.first?.between("<Tags>", "</Tags>")?.split(separator: ",").contains("greeting") == true)

            // By tag, with the JS SDK's double encoding and the Java SDK's parameter spelling.
            let byTag = try await pageThrough(h, "/tags/all/registrations", parameter: "ContinuationToken", reencode: true)
            #expect(byTag.ids.count == 250)
            #expect(Set(byTag.ids) == expected)

            // $top above 100 is capped; a token that is not the emulator's is refused.
            let capped = try await h.call(.GET, "/registrations", query: "$top=1000")
            #expect(capped.body.all(between: "<entry", "</entry>").count == 100)
            #expect(capped.header("X-MS-ContinuationToken") != nil)
            #expect(try await h.call(.GET, "/registrations", query: "continuationtoken=c100").status == 400)
            #expect(try await h.call(.GET, "/registrations", query: "$top=0").status == 400)
        }
    }

    @Test("Registrations created or deleted between pages: every one present throughout is listed exactly once")
    func stableUnderChanges() async throws {
        try await Harness.with { h in
            var ids: [String] = []
            for n in 0..<30 { ids.append(try await h.register(Entry.gcm("g-\(n)", tags: "t"))) }
            let first = try await h.call(.GET, "/registrations", query: "$top=10")
            var seen = first.body.all(between: "<RegistrationId>", "</RegistrationId>")
            var token = first.header("X-MS-ContinuationToken")
            // Deleting a listed and an unlisted registration and adding one does not shift the pages.
            #expect(try await h.call(.DELETE, "/registrations/\(ids[0])", headers: [("If-Match", "*")]).status == 200)
            #expect(try await h.call(.DELETE, "/registrations/\(ids[20])", headers: [("If-Match", "*")]).status == 200)
            let added = try await h.register(Entry.gcm("g-new", tags: "t"))
            while let current = token {
                let page = try await h.call(.GET, "/registrations", query: "$top=10&continuationtoken=\(current)")
                seen += page.body.all(between: "<RegistrationId>", "</RegistrationId>")
                token = page.header("X-MS-ContinuationToken")
            }
            let expected = ids.enumerated().filter { $0.offset != 20 }.map(\.element) + [added]
            #expect(seen == expected)
        }
    }
}

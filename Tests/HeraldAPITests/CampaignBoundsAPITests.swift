import Foundation
import HeraldAPI
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

/// The campaign routes' bounds: the body limit of a definition, and the hub sends a run may make.
@Suite("Campaign API bounds", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignBoundsAPITests {
    /// `{"users": [...]}` of `count` users with names of 8 characters.
    static func users(_ count: Int) -> String {
        #"{"users":[\#((0..<count).map { "\"user\(String(format: "%04d", $0))\"" }.joined(separator: ","))]}"#
    }

    @Test("the documented 10,000-user audience is accepted by create and PATCH (a body over 64 KB)")
    func tenThousandUsers() async throws {
        try await APIHarness.with { api async throws in
            let key = try await api.makeKey("sender").key
            let body = campaignJSON(name: "everyone-listed", audience: Self.users(10_000))
            #expect(body.utf8.count > APIConfiguration.maxBodyBytes.defaultValue, "\(body.utf8.count) bytes")
            let created = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: body)
            #expect(created.status == .created, "\(created.text.prefix(300))")
            let id = try #require(created.object?["id"] as? Int)
            #expect(((created.object?["audience"] as? [String: [String]])?["users"])?.count == 10_000)

            let patch = #"{"audience":\#(Self.users(9_999))}"#
            let patched = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: patch)
            #expect(patched.status == .ok, "\(patched.text.prefix(300))")
            #expect(((patched.object?["audience"] as? [String: [String]])?["users"])?.count == 9_999)

            // Other routes keep the general limit.
            let big = #"{"target":\#(Self.users(10_000)),"content":{"apple":{"aps":{}}}}"#
            let refused = try await api.send(.post, "/v1/notifications", auth: keyAuth(key), json: big)
            #expect(refused.status == .contentTooLarge)
        }
    }

    @Test("a campaign whose run needs more hub sends than a run may is 422 run_too_large with the figures; nothing is saved")
    func runTooLargeAtSave() async throws {
        try await APIHarness.with(storage: StorageConfiguration(campaignMaxHubSendsPerRun: 10)) { api async throws in
            let key = try await api.makeKey("sender").key
            // 60 users, local time: 12 chunks of 5 in one zone at least, in one format.
            let localTime = campaignJSON(name: "local", audience: Self.users(60), extra: #","localTime":"09:00""#)
            let refused = try await api.send(.post, "/v1/campaigns", auth: keyAuth(key), json: localTime)
            #expect(refused.status == .unprocessableContent, "\(refused.text)")
            #expect(refused.errorCode == "run_too_large")
            let message = refused.errorMessage ?? ""
            #expect(message.contains("at least 12 hub sends") && message.contains("at most 10"), "\(message)")
            #expect(message.contains("HERALD_CAMPAIGN_MAX_HUB_SENDS_PER_RUN"), "\(message)")
            #expect(try await api.count("SELECT count(*) FROM campaigns") == 0)

            // The same audience without local time: 3 chunks of 20. Saved; a PATCH over the limit is refused.
            let id = try await CampaignAPITests.create(api, key: key, campaignJSON(name: "plain", audience: Self.users(60)))
            let patch = #"{"content":{"apple":{"aps":{}},"template":{"m":"x"},"windows":"<toast/>","fcmv1":{"message":{}}}}"#
            let over = try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: patch)
            #expect(over.status == .unprocessableContent, "\(over.text)")
            #expect(over.errorCode == "run_too_large")
            #expect(over.errorMessage?.contains("12 hub sends") == true, "\(over.errorMessage ?? "")")
            #expect(
                try await api.count("SELECT count(*) FROM campaigns WHERE content ? 'windows'") == 0, "the PATCH changed nothing")
        }
    }
}

import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import Testing

@testable import HeraldAPI

/// Campaigns belong to the key that created them: another sending key finds nothing, an `admin`
/// key reaches every campaign, and every change (and every cancel) leaves an `ops_actions` row.
@Suite("Campaign owners", .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct CampaignOwnerAPITests {
    @Test("another send key gets 404 not_found on every campaign route of the router, and lists none; nothing changes")
    func otherKeyFindsNothing() async throws {
        try await APIHarness.with { api async throws in
            let (owner, ownerID) = try await api.makeKey("owner")
            let other = try await api.makeKey("other").key
            let id = try await CampaignAPITests.create(api, key: owner)
            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(owner))
            #expect(fired.status == .created, "\(fired.text)")
            let runID = try #require(fired.object?["id"] as? Int)

            // Every route of the router addressing a campaign, so a route added later is covered.
            let routes = APIRoutes.all.filter { $0.path.hasPrefix("/v1/campaigns/{id}") }
            #expect(routes.count >= 9, "\(routes.map(\.path))")
            for route in routes {
                let path = route.path.replacingOccurrences(of: "{id}", with: "\(id)")
                    .replacingOccurrences(of: "{run}", with: "\(runID)")
                let body: String? = route.method == .patch ? #"{"ttl":60}"# : nil
                let answer = try await api.send(route.method, path, auth: keyAuth(other), json: body)
                #expect(answer.status == .notFound, "\(route.method) \(path): \(answer.text)")
                #expect(answer.errorCode == "not_found", "\(route.method) \(path)")
            }
            let othersList = try await api.send(.get, "/v1/campaigns?includeArchived=true", auth: keyAuth(other))
            #expect(othersList.status == .ok)
            #expect((othersList.object?["campaigns"] as? [Any])?.isEmpty == true, "\(othersList.text)")

            // Nothing changed: the campaign is active, unpatched, with its one running run.
            let stored = try #require(try await api.stores.campaigns.campaign(id: Int64(id)))
            #expect(stored.state == .active)
            #expect(stored.definition.ttl == nil)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs") == 1)
            #expect(try await api.count("SELECT count(*) FROM campaign_runs WHERE state = 'Running'") == 1)
            #expect(try await api.count("SELECT count(*) FROM ops_actions WHERE api_key_id <> \(ownerID)") == 0)

            // The owner sees it, with its owner key by public id and name.
            let mine = try await api.send(.get, "/v1/campaigns", auth: keyAuth(owner))
            let listed = try #require((mine.object?["campaigns"] as? [[String: Any]])?.first)
            #expect(listed["id"] as? Int == id)
            #expect(listed["ownerKey"] as? [String: String] == ["id": "\(ownerID)", "name": "owner"])
            #expect(!mine.text.contains(owner), "the key itself is never shown")
        }
    }

    @Test("an admin key reaches a key's campaign and heraldctl's; a read-only key reads all; a sender lists only its own")
    func adminAndReaders() async throws {
        try await APIHarness.with { api async throws in
            let owner = try await api.makeKey("owner").key
            let other = try await api.makeKey("other").key
            let admin = try await api.makeKey("ops", scopes: [.admin]).key
            let reader = try await api.makeKey("dashboard", scopes: [.read]).key
            let id = try await CampaignAPITests.create(api, key: owner)
            let othersID = try await CampaignAPITests.create(api, key: other, campaignJSON(name: "others"))
            // heraldctl saves without a key: only admin keys act on it.
            let unowned = try await api.stores.campaigns.create(
                CampaignDefinition(
                    name: "ctl", audience: .tags("sports"), content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *"))))
            let unownedDetail = try await api.send(.get, "/v1/campaigns/\(unowned.id)", auth: keyAuth(admin))
            #expect(unownedDetail.status == .ok)
            #expect(unownedDetail.object?["ownerKey"] == nil, "\(unownedDetail.text)")
            #expect(try await api.send(.get, "/v1/campaigns/\(unowned.id)", auth: keyAuth(owner)).status == .notFound)
            #expect(try await api.send(.post, "/v1/campaigns/\(unowned.id)/pause", auth: keyAuth(owner)).status == .notFound)

            #expect(try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(admin)).status == .ok)
            #expect(try await api.stores.campaigns.campaign(id: Int64(id))?.state == .paused)
            func ids(_ key: String) async throws -> [Int] {
                let page = try await api.send(.get, "/v1/campaigns", auth: keyAuth(key))
                return (page.object?["campaigns"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } ?? []
            }
            #expect(try await ids(owner) == [id])
            #expect(try await ids(other) == [othersID])
            #expect(try await ids(admin) == [id, othersID, Int(unowned.id)])
            #expect(try await ids(reader) == [id, othersID, Int(unowned.id)])
            #expect(try await api.send(.get, "/v1/campaigns/\(othersID)/runs", auth: keyAuth(reader)).status == .ok)
        }
    }

    @Test("every campaign change, run cancel and single notification cancel writes an ops_actions row")
    func audited() async throws {
        try await APIHarness.with { api async throws in
            let (key, keyID) = try await api.makeKey("owner")
            let id = try await CampaignAPITests.create(api, key: key)
            #expect(try await api.send(.patch, "/v1/campaigns/\(id)", auth: keyAuth(key), json: #"{"ttl":60}"#).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(key)).status == .ok)
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/resume", auth: keyAuth(key)).status == .ok)
            let fired = try await api.send(.post, "/v1/campaigns/\(id)/runs", auth: keyAuth(key))
            let runID = try #require(fired.object?["id"] as? Int)
            #expect(try await api.send(.delete, "/v1/campaigns/\(id)/runs/\(runID)", auth: keyAuth(key)).status == .ok)
            #expect(try await api.send(.delete, "/v1/campaigns/\(id)", auth: keyAuth(key)).status == .ok)
            let notification = try await OpsActionsAPITests.create(api, key)
            #expect(try await api.send(.delete, "/v1/notifications/\(notification)", auth: keyAuth(key)).status == .ok)
            // A refused change writes nothing.
            #expect(try await api.send(.post, "/v1/campaigns/\(id)/pause", auth: keyAuth(key)).status == .conflict)

            var rows: [(Int64?, String, String, String)] = []
            for try await row in try await api.db.client.query(
                "SELECT api_key_id, action, filter::text, counts::text FROM ops_actions ORDER BY id", logger: api.db.logger
            ).decode((Int64?, String, String, String).self) {
                rows.append(row)
            }
            #expect(
                rows.map(\.1) == [
                    "campaign.create", "campaign.update", "campaign.pause", "campaign.resume", "campaign.fire",
                    "campaign_run.cancel", "campaign.archive", "notification.cancel",
                ], "\(rows)")
            #expect(rows.allSatisfy { $0.0 == keyID })
            #expect(rows[0].2 == #"{"campaignId": \#(id)}"#)
            #expect(rows[4].2 == #"{"runId": \#(runID), "campaignId": \#(id)}"#)
            #expect(rows[4].3 == #"{"fired": 1}"#)
            #expect(rows[5].3.contains(#""cancelled": "#) && !rows[5].3.contains(#""cancelled": 0"#), "\(rows[5])")
            #expect(rows[7].2 == #"{"id": "\#(notification.lowercased())"}"#)
            #expect(rows[7].3 == #"{"cancelled": 1}"#)
        }
    }

    @Test("heraldctl's changes are audited without a key")
    func auditedWithoutKey() async throws {
        try await APIHarness.with { api async throws in
            let campaigns = api.stores.campaigns
            let campaign = try await campaigns.create(
                CampaignDefinition(
                    name: "ctl", audience: .tags("sports"), content: NotificationContent(apple: #"{"aps":{"alert":"x"}}"#),
                    schedule: .recurring(try CronSchedule(expression: "0 9 * * *"))))
            _ = try await campaigns.setState(id: campaign.id, .paused)
            #expect(
                try await api.count(
                    "SELECT count(*) FROM ops_actions WHERE api_key_id IS NULL AND action IN ('campaign.create', 'campaign.pause')")
                    == 2)
        }
    }
}

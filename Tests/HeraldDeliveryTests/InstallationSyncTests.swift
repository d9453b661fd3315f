import Foundation
import HeraldDomain
import HeraldStorage
import HeraldTestSupport
import NotificationHubs
import Testing

@Suite(
    "Installation sync", .serialized,
    .enabled(if: TestDatabase.isEnabled, "needs HERALD_DATABASE_URL (make test sets it)"))
struct InstallationSyncTests {
    @Test("an installation-style device becomes a hub installation with its tags and templates; delete removes it")
    func installationLifecycle() async throws {
        try await withDelivery { world in
            let alice = try await world.user("alice")
            let handle = Handles.apns()
            let installationID = "inst-" + UUID().uuidString.lowercased()
            let body = #"{"aps":{"alert":"$(messageParam)"}}"#
            let record = try await world.store.registerInstallation(
                owner: alice, installationID: installationID, platform: .apns, handle: handle,
                clientTags: ["World"], templates: ["news": InstallationTemplateSpec(body: body, tags: ["Sports"])])
            let device = try await world.settled(record.id)
            #expect(device.hubRegistrationID == nil)

            let installation = try await world.hubClient.installation(id: installationID)
            #expect(installation.platform == .apns && installation.pushChannel == handle)
            #expect(Set(installation.tags?.withoutMarker ?? []) == ["World", "username:alice", "tz:UTC"])
            #expect(installation.templates?["news"]?.body == body)
            #expect(installation.templates?["news"]?.tags?.contains("Sports") == true, "the template's own tags")
            let held = try await world.hub.inspection.registrations().filter { $0.installationId == installationID }
            #expect(held.count == 2, "one native and one template registration")
            #expect(held.contains { $0.templateBody == body && $0.tags.contains("Sports") })
            #expect(
                try await world.calls(record.id).map { "\($0.operation) \($0.httpStatus ?? 0)" } == [
                    "createOrUpdateInstallation 200"
                ])

            // A change of tags overwrites the installation.
            try await world.store.registerInstallation(
                owner: alice, installationID: installationID, platform: .apns, handle: handle,
                clientTags: ["Science"], templates: [:])
            try await world.settled(record.id)
            let updated = try await world.hubClient.installation(id: installationID)
            #expect(Set(updated.tags?.withoutMarker ?? []) == ["Science", "username:alice", "tz:UTC"])
            #expect(updated.templates?.isEmpty ?? true)

            try await world.store.delete(owner: alice, id: record.id)
            let deleted = try await world.settled(record.id, state: .deleted)
            #expect(deleted.isDeleted)
            await #expect {
                try await world.hubClient.installation(id: installationID)
            } throws: { error in
                (error as? NotificationHubsError)?.isNotFound == true
            }
            #expect(try await world.hub.inspection.registrations().allSatisfy { $0.installationId != installationID })
            let last = try await world.calls(record.id).last
            #expect(last?.operation == "deleteInstallation" && last?.hubID == installationID && last?.httpStatus == 204)
        }
    }

    @Test("a 503 on an installation write is retried until the installation is there")
    func installationRetry() async throws {
        try await withDelivery { world in
            try await world.hub.inspection.addFaults([
                FaultRule(method: "PUT", pathPattern: "/installations/", status: 503, count: 1)
            ])
            let bob = try await world.user("bob")
            let installationID = "inst-" + UUID().uuidString.lowercased()
            let record = try await world.store.registerInstallation(
                owner: bob, installationID: installationID, platform: .fcmv1, handle: Handles.fcm(), clientTags: [],
                templates: [:])
            try await world.settled(record.id)
            #expect(try await world.hubClient.installation(id: installationID).tags?.withoutMarker == ["username:bob", "tz:UTC"])
            #expect(try await world.calls(record.id).map(\.httpStatus) == [503, 200])
        }
    }
}

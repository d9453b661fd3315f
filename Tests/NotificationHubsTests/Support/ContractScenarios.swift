import Foundation
import NotificationHubs
import Testing

/// Client operations exercised end to end, against the emulator or a real hub. Checks of what
/// reached the platforms need the emulator's inspection API and are skipped for a real hub.
enum ContractScenarios {
    // MARK: Registrations

    /// Registration id, create-or-update (ETag 1 then 2), get, update with a stale ETag (412),
    /// update with the current one, delete, 404s.
    static func registrationLifecycle(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let token = TestData.apnsToken()
        let id = try await client.createRegistrationID()
        #expect(!id.isEmpty)
        #expect(!id.contains("?") && !id.contains("/"))

        let tags = [TestData.tag("run"), "username:alice"]
        let created = try await client.createOrUpdateRegistration(.apple(deviceToken: token, tags: tags, registrationID: id))
        #expect(created.registrationID == id)
        #expect(created.eTag == "1")
        #expect(created.channel == .apple(deviceToken: token))
        #expect(Set(created.tags) == Set(tags))
        #expect(created.template == nil)
        #expect(created.expirationTime != nil)

        let updated = try await client.createOrUpdateRegistration(
            .apple(deviceToken: token, tags: ["username:bob"], registrationID: id))
        #expect(updated.eTag == "2")
        #expect(updated.tags == ["username:bob"])  // replaced, not merged

        var fetched = try await client.registration(id: id)
        #expect(fetched.registrationID == id)
        #expect(fetched.eTag == "2")
        #expect(fetched.tags == ["username:bob"])

        var stale = fetched
        stale.eTag = "1"
        let mismatch = await hubError { _ = try await client.updateRegistration(stale) }
        #expect(mismatch?.status == 412)
        #expect(mismatch?.isPermanent == true)

        fetched.tags = ["username:carol"]
        let replaced = try await client.updateRegistration(fetched)
        #expect(replaced.eTag == "3")
        #expect(replaced.tags == ["username:carol"])

        try await client.deleteRegistration(id: id)
        let missing = await hubError { _ = try await client.registration(id: id) }
        #expect(missing?.status == 404)
        #expect(missing?.isNotFound == true)
        #expect(missing?.isPermanent == true)
        let again = await hubError { try await client.deleteRegistration(id: id) }
        #expect(again?.isNotFound == true)
    }

    /// Every registration kind the issue names, created and read back.
    static func everyRegistrationKind(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("kinds")
        let token = TestData.apnsToken()
        let kinds: [Registration] = [
            .apple(deviceToken: token, tags: [tag]),
            .appleTemplate(
                deviceToken: token, body: #"{"aps":{"alert":"$(message)"}}"#, name: "alert", expiry: "$(expiry)",
                priority: "10", headers: ["apns-push-type": "alert"], tags: [tag]),
            .fcmV1(token: TestData.fcmToken(), tags: [tag]),
            .fcmV1Template(
                token: TestData.fcmToken(), body: #"{"message":{"android":{"data":{"message":"$(message)"}}}}"#,
                name: "data", tags: [tag]),
            .gcm(registrationID: TestData.fcmToken(), tags: [tag]),
            .gcmTemplate(registrationID: TestData.fcmToken(), body: #"{"data":{"message":"$(message)"}}"#, tags: [tag]),
            .windows(channelURI: TestData.wnsChannel(), tags: [tag]),
            .windowsTemplate(
                channelURI: TestData.wnsChannel(),
                body: #"<toast><visual><binding template="ToastText01"><text id="1">$(message)</text></binding></visual></toast>"#,
                name: "toast", tags: [tag]),
        ]
        var ids: [String] = []
        for registration in kinds {
            let stored = try await client.createRegistration(registration)
            let id = try #require(stored.registrationID)
            ids.append(id)
            #expect(stored.eTag == "1")
            #expect(stored.channel == registration.channel)
            #expect(stored.tags == [tag])
            #expect(stored.template?.body == registration.template?.body)
            #expect(stored.template?.name == registration.template?.name)
            if let headers = registration.template?.headers, !headers.isEmpty {
                #expect(stored.template?.headers == headers)
            }
            let read = try await client.registration(id: id)
            #expect(read.channel == registration.channel)
            #expect(read.isTemplate == registration.isTemplate)
        }
        for id in ids { try await client.deleteRegistration(id: id) }
    }

    /// Listing by channel (`$filter`), by tag, all, with continuation tokens.
    static func listings(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("list")
        let token = TestData.apnsToken()
        var ids: [String] = []
        ids.append(try #require(try await client.createRegistration(.apple(deviceToken: token, tags: [tag])).registrationID))
        ids.append(
            try #require(
                try await client.createRegistration(
                    .appleTemplate(deviceToken: token, body: #"{"aps":{"alert":"$(m)"}}"#, tags: [tag])
                ).registrationID))
        ids.append(
            try #require(try await client.createRegistration(.fcmV1(token: TestData.fcmToken(), tags: [tag])).registrationID))

        let byChannel = try await client.registrations(forChannel: token)
        #expect(Set(byChannel.registrations.compactMap(\.registrationID)) == Set(ids[0...1]))
        #expect(byChannel.continuationToken == nil)
        #expect(try await client.registrations(forChannel: TestData.apnsToken()).registrations.isEmpty)

        let byTag = try await client.registrations(withTag: tag)
        #expect(Set(byTag.registrations.compactMap(\.registrationID)) == Set(ids))

        // Pages of two, following the continuation token.
        var seen: [String] = []
        var continuation: String?
        var pages = 0
        repeat {
            let page = try await client.registrations(withTag: tag, top: 2, continuationToken: continuation)
            #expect(page.registrations.count <= 2)
            seen += page.registrations.compactMap(\.registrationID)
            continuation = page.continuationToken
            pages += 1
        } while continuation != nil && pages < 10
        #expect(pages == 2)
        #expect(Set(seen) == Set(ids))
        #expect(seen.count == ids.count)

        let first = try await client.allRegistrations(top: 1)
        #expect(first.registrations.count == 1)
        if hub.inspection != nil {
            #expect(first.continuationToken != nil)  // the emulator holds exactly these three
        }

        for id in ids { try await client.deleteRegistration(id: id) }
        #expect(try await client.registrations(withTag: tag).registrations.isEmpty)
    }

    // MARK: Installations

    /// PUT, GET, PATCH, registrations derived from it, DELETE.
    static func installations(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let id = UUID().uuidString.lowercased()
        let token = TestData.apnsToken()
        let tag = TestData.tag("inst")
        var installation = Installation(
            id: id, platform: .apns, pushChannel: token, tags: [tag],
            templates: ["alert": InstallationTemplate(body: #"{"aps":{"alert":"$(message)"}}"#)],
            pushVariables: ["v": "1"])
        try await client.createOrUpdateInstallation(installation)

        let read = try await hub.eventually { try await client.installation(id: id) }
        #expect(read.installationID == id)
        #expect(read.platform == .apns)
        #expect(read.pushChannel.uppercased() == token)
        #expect(read.tags == [tag])
        #expect(read.pushVariables == ["v": "1"])
        #expect(read.templates?["alert"]?.body == #"{"aps":{"alert":"$(message)"}}"#)
        #expect(read.pushChannelExpired == false)

        try await client.patchInstallation(id: id, [.addTag("extra"), .setUserID("user-\(id.prefix(8))")])
        let patched = try await hub.eventually {
            let value = try await client.installation(id: id)
            guard value.userID != nil else { throw NotificationHubsError(code: .hubStatus, operation: "test", status: 404) }
            return value
        }
        #expect(Set(patched.tags ?? []) == [tag, "extra"])
        #expect(patched.userID == "user-\(id.prefix(8))")

        try await client.patchInstallation(id: id, [.removeTag("extra")])
        let unpatched = try await hub.eventually {
            let value = try await client.installation(id: id)
            guard value.tags == [tag] else { throw NotificationHubsError(code: .hubStatus, operation: "test", status: 404) }
            return value
        }
        #expect(unpatched.tags == [tag])

        if hub.inspection != nil {
            // The installation shows up as registrations tagged $InstallationId:{id}.
            let derived = try await client.registrations(withTag: "$InstallationId:{\(id)}")
            #expect(!derived.registrations.isEmpty)
            #expect(derived.registrations.allSatisfy { $0.tags.contains("$InstallationId:{\(id)}") })
        }

        installation.tags = nil
        try await client.createOrUpdateInstallation(installation)
        try await client.deleteInstallation(id: id)
        try await client.deleteInstallation(id: id)  // 204 even when absent
        if !hub.isEventuallyConsistent {
            let gone = await hubError { _ = try await client.installation(id: id) }
            #expect(gone?.isNotFound == true)
        }
    }

    // MARK: Sends

    /// A native APNs send to a tag, with APNs headers.
    static func nativeAppleSend(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("apple")
        let token = TestData.apnsToken()
        let id = try #require(try await client.createRegistration(.apple(deviceToken: token, tags: [tag])).registrationID)
        let payload = #"{"aps":{"alert":"Hello \"you\""}}"#
        let outcome = try await client.send(
            .apple(payload, pushType: .alert, priority: 10, expiration: Date(timeIntervalSince1970: 2_000_000_000),
                   collapseID: "c-1"),
            to: .tag(tag))
        #expect(outcome.state == .enqueued)
        #expect(outcome.trackingID != nil)
        if let inspection = hub.inspection {
            let notificationID = try #require(outcome.notificationID)
            let deliveries = try await inspection.deliveries(notificationID: notificationID)
            #expect(deliveries.count == 1)
            let delivery = try #require(deliveries.first)
            #expect(delivery.format == "apple")
            #expect(delivery.platform == "apns")
            #expect(delivery.pnsHandle?.uppercased() == token)
            #expect(delivery.registrationId == id)
            #expect(delivery.tagExpression == tag)
            #expect(delivery.payload == payload)
            #expect(delivery.header("apns-push-type") == "alert")
            #expect(delivery.header("apns-priority") == "10")
            #expect(delivery.header("apns-expiration") == "2000000000")
            #expect(delivery.header("apns-collapse-id") == "c-1")
        }
        try await client.deleteRegistration(id: id)
    }

    /// FCM v1, GCM and WNS native sends; a tag list (OR) and an AND expression.
    static func otherNativeSends(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let a = TestData.tag("a")
        let b = TestData.tag("b")
        let fcm = try #require(try await client.createRegistration(.fcmV1(token: TestData.fcmToken(), tags: [a])).registrationID)
        let fcm2 = try #require(try await client.createRegistration(.fcmV1(token: TestData.fcmToken(), tags: [b])).registrationID)
        let gcm = try #require(try await client.createRegistration(.gcm(registrationID: TestData.fcmToken(), tags: [a])).registrationID)
        let wns = try #require(try await client.createRegistration(.windows(channelURI: TestData.wnsChannel(), tags: [a, b])).registrationID)

        let fcmPayload = #"{"message":{"notification":{"title":"T","body":"B"}}}"#
        let either = try await client.send(.fcmV1(fcmPayload), to: .tags([a, b]))
        let gcmSend = try await client.send(.gcm(#"{"data":{"k":"v"}}"#), to: .tag(a))
        let toast = #"<toast><visual><binding template="ToastText01"><text id="1">Hi</text></binding></visual></toast>"#
        let both = try await client.send(.windows(toast, type: .toast), to: .tagExpression("\(a) && \(b)"))
        let none = try await client.send(.windows(toast), to: .tagExpression("\(a) && !\(b)"))
        for outcome in [either, gcmSend, both, none] { #expect(outcome.state == .enqueued) }

        if let inspection = hub.inspection {
            let fcmDeliveries = try await inspection.deliveries(notificationID: try #require(either.notificationID))
            #expect(Set(fcmDeliveries.compactMap(\.registrationId)) == [fcm, fcm2])
            #expect(fcmDeliveries.allSatisfy { $0.platform == "fcmv1" && $0.format == "fcmv1" })
            let gcmDeliveries = try await inspection.deliveries(notificationID: try #require(gcmSend.notificationID))
            #expect(gcmDeliveries.map(\.registrationId) == [gcm])
            let wnsDeliveries = try await inspection.deliveries(notificationID: try #require(both.notificationID))
            #expect(wnsDeliveries.map(\.registrationId) == [wns])
            #expect(wnsDeliveries.first?.header("X-WNS-Type") == "wns/toast")
            #expect(wnsDeliveries.first?.payload == toast)
            #expect(try await inspection.deliveries(notificationID: try #require(none.notificationID)).isEmpty)
        }
        for id in [fcm, fcm2, gcm, wns] { try await client.deleteRegistration(id: id) }
    }

    /// A template send expanded by APNs, FCM v1 and WNS template registrations.
    static func templateSend(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("tmpl")
        let apple = try #require(
            try await client.createRegistration(
                .appleTemplate(deviceToken: TestData.apnsToken(), body: #"{"aps":{"alert":"$(message)"}}"#, tags: [tag])
            ).registrationID)
        let fcm = try #require(
            try await client.createRegistration(
                .fcmV1Template(
                    token: TestData.fcmToken(), body: #"{"message":{"android":{"data":{"message":"$(message)"}}}}"#,
                    tags: [tag])
            ).registrationID)
        let wns = try #require(
            try await client.createRegistration(
                .windowsTemplate(
                    channelURI: TestData.wnsChannel(), body: #"<toast><visual><binding template="ToastText01"><text id="1">$(message)</text></binding></visual></toast>"#,
                    tags: [tag])
            ).registrationID)
        let native = try #require(
            try await client.createRegistration(.apple(deviceToken: TestData.apnsToken(), tags: [tag])).registrationID)

        let outcome = try await client.send(.template(["message": "Breaking"]), to: .tag(tag))
        #expect(outcome.state == .enqueued)
        if let inspection = hub.inspection {
            let deliveries = try await inspection.deliveries(notificationID: try #require(outcome.notificationID))
            #expect(Set(deliveries.compactMap(\.registrationId)) == [apple, fcm, wns])  // not the native one
            let byID = Dictionary(uniqueKeysWithValues: deliveries.compactMap { d in d.registrationId.map { ($0, d) } })
            #expect(byID[apple]?.payload == #"{"aps":{"alert":"Breaking"}}"#)
            #expect(byID[apple]?.platform == "apns")
            #expect(byID[fcm]?.payload == #"{"message":{"android":{"data":{"message":"Breaking"}}}}"#)
            #expect(byID[wns]?.payload?.contains(#"<text id="1">Breaking</text>"#) == true)
            #expect(byID[wns]?.header("X-WNS-Type") == "wns/toast")
            #expect(deliveries.allSatisfy { $0.format == "template" })
        }
        for id in [apple, fcm, wns, native] { try await client.deleteRegistration(id: id) }
    }

    /// Sends to installations by `$InstallationId` and `$UserId`.
    static func installationTargets(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let id = UUID().uuidString.lowercased()
        let user = "user-" + id.prefix(8)
        try await client.createOrUpdateInstallation(
            Installation(id: id, platform: .apns, pushChannel: TestData.apnsToken(), userID: user))
        let byInstallation = try await client.send(.apple(#"{"aps":{"alert":"1"}}"#), to: .installation(id))
        let byUser = try await client.send(.apple(#"{"aps":{"alert":"2"}}"#), to: .user(user))
        if let inspection = hub.inspection {
            let first = try await inspection.deliveries(notificationID: try #require(byInstallation.notificationID))
            #expect(first.map(\.installationId) == [id])
            let second = try await inspection.deliveries(notificationID: try #require(byUser.notificationID))
            #expect(second.map(\.installationId) == [id])
        }
        try await client.deleteInstallation(id: id)
    }

    /// Direct send to one handle, and a batch direct send to several.
    static func directAndBatchSends(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let token = TestData.apnsToken()
        let direct = try await client.send(.apple(#"{"aps":{"alert":"direct"}}"#, pushType: .alert), to: .device(handle: token))
        #expect(direct.state == .enqueued)
        let handles = (0..<3).map { _ in TestData.apnsToken() }
        let batch = try await client.sendBatch(.apple(#"{"aps":{"alert":"batch"}}"#), toDevices: handles)
        #expect(batch.state == .enqueued)
        if let inspection = hub.inspection {
            let one = try await inspection.deliveries(notificationID: try #require(direct.notificationID))
            #expect(one.count == 1)
            #expect(one.first?.pnsHandle?.uppercased() == token)
            #expect(one.first?.payload == #"{"aps":{"alert":"direct"}}"#)
            #expect(one.first?.header("apns-push-type") == "alert")
            let many = try await inspection.deliveries(notificationID: try #require(batch.notificationID))
            #expect(Set(many.compactMap { $0.pnsHandle?.uppercased() }) == Set(handles))
            #expect(many.allSatisfy { $0.payload == #"{"aps":{"alert":"batch"}}"# })
        }
    }

    /// A test send answers with per-registration results.
    static func testSend(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("debug")
        let id = try #require(
            try await client.createRegistration(.apple(deviceToken: TestData.apnsToken(), tags: [tag])).registrationID)
        let outcome = try await client.sendTest(.apple(#"{"aps":{"alert":"test"}}"#), to: .tag(tag))
        #expect(outcome.state == .detailedStateAvailable)
        #expect(outcome.success + outcome.failure == 1)
        #expect(outcome.results.count == 1)
        #expect(outcome.results.first?.registrationID == id)
        let unmatched = try await client.sendTest(.apple(#"{"aps":{"alert":"test"}}"#), to: .tag(TestData.tag("nobody")))
        #expect(unmatched.success == 0 && unmatched.failure == 0 && unmatched.results.isEmpty)
        try await client.deleteRegistration(id: id)
    }

    /// Schedule a send an hour ahead, then cancel it.
    static func scheduleAndCancel(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let outcome = try await client.schedule(
            .template(["message": "later"]), at: Date().addingTimeInterval(3600), to: .tag(TestData.tag("later")))
        #expect(outcome.state == .scheduled)
        let id = try #require(outcome.notificationID)
        try await client.cancelScheduledNotification(id: id)
        if let inspection = hub.inspection {
            #expect(try await inspection.deliveries(notificationID: id).isEmpty)
        }
    }

    /// Telemetry: Completed with a per-platform Success count, and NoTargetFound.
    static func telemetry(_ hub: ContractHub) async throws {
        let client = try hub.client()
        let tag = TestData.tag("telemetry")
        let id = try #require(
            try await client.createRegistration(.apple(deviceToken: TestData.apnsToken(), tags: [tag])).registrationID)
        let sent = try await client.send(.apple(#"{"aps":{"alert":"t"}}"#), to: .tag(tag))
        let nobody = try await client.send(.apple(#"{"aps":{"alert":"t"}}"#), to: .tag(TestData.tag("nobody")))

        let details = try await pollDetails(hub, client, try #require(sent.notificationID)) { $0.state == .completed }
        #expect(details.state == .completed)
        if hub.inspection != nil {
            #expect(details.outcomeCounts[.apns]?["Success"] == 1)
        }
        let empty = try await pollDetails(hub, client, try #require(nobody.notificationID)) { $0.state == .noTargetFound }
        #expect(empty.state == .noTargetFound)
        try await client.deleteRegistration(id: id)
    }

    private static func pollDetails(
        _ hub: ContractHub,
        _ client: NotificationHubClient,
        _ id: String,
        until done: (NotificationDetails) -> Bool
    ) async throws -> NotificationDetails {
        guard hub.isEventuallyConsistent else { return try await client.notificationDetails(id: id) }
        // A real hub: telemetry appears after processing (404 until then); poll up to a minute.
        var last: NotificationDetails?
        for _ in 0..<30 {
            do {
                let details = try await client.notificationDetails(id: id)
                if done(details) { return details }
                last = details
            } catch {
                guard error.isNotFound else { throw error }
            }
            try await Task.sleep(for: .seconds(2))
        }
        return try #require(last)
    }

    // MARK: Errors every hub produces

    /// A wrong key → 401, classified as authentication.
    static func wrongKey(_ hub: ContractHub) async throws {
        let parsed = try NotificationHubConnectionString(hub.fullConnectionString)
        let wrong = try NotificationHubClient(
            connectionString: NotificationHubConnectionString(
                endpoint: parsed.endpoint, sharedAccessKeyName: parsed.sharedAccessKeyName,
                sharedAccessKey: "V3JvbmdLZXlXcm9uZ0tleVdyb25nS2V5V3Jvbmc9PT0="),
            hubName: hub.hubName, httpClient: hub.httpClient)
        let error = await hubError { _ = try await wrong.send(.template(["m": "x"]), to: .tag("t")) }
        #expect(error?.status == 401)
        #expect(error?.isAuthentication == true)
        #expect(error?.isTransient == false)
        #expect(error?.isPermanent == false)
    }

    /// A Listen-only rule may register but not send: 403 without Retry-After.
    static func listenOnlyRule(_ hub: ContractHub) async throws {
        let listen = try NotificationHubClient(
            connectionString: try #require(hub.listenConnectionString), hubName: hub.hubName, httpClient: hub.httpClient)
        let stored = try await listen.createRegistration(.apple(deviceToken: TestData.apnsToken(), tags: ["listen"]))
        let error = await hubError { _ = try await listen.send(.apple(#"{"aps":{}}"#), to: .device(handle: TestData.apnsToken())) }
        #expect(error?.status == 403)
        #expect(error?.isQuota == true)
        #expect(error?.isThrottled == false)
        #expect(error?.isPermanent == true)
        #expect(error?.trackingID != nil)
        try await listen.deleteRegistration(id: try #require(stored.registrationID))
    }
}

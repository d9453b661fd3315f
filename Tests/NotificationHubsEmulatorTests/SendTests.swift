import Foundation
import NotificationHubsEmulator
import Testing

/// Sends, deliveries and telemetry (reference §2.7–2.8, §8).
@Suite("Sends")
struct SendTests {
    static let alert = #"{"aps":{"alert":"Hello"}}"#

    @Test("A send fans out to exactly the matching registrations, with the payloads recorded")
    func fanOut() async throws {
        try await Harness.with { h in
            let a = try await h.register(Entry.apple(apnsToken(1), tags: "a,b"))
            let b = try await h.register(Entry.apple(apnsToken(2), tags: "b"))
            let bDuplicate = try await h.register(Entry.apple(apnsToken(2), tags: "b"))  // same handle as b
            _ = try await h.register(Entry.gcm("gcm-1", tags: "b"))
            let v1 = try await h.register(Entry.fcmV1("v1-1", tags: "b"))
            let appleTemplate = try await h.register(
                Entry.appleTemplate(apnsToken(3), tags: "b", body: ##"{"aps":{"alert":"$(message)","badge":"#(count)"}}"##, name: "t", expiry: "$(expiry)",
                                    headers: [("apns-push-type", "alert")]))
            let windowsTemplate = try await h.register(
                Entry.windowsTemplate("https://wns.example/1", tags: "c", body: "<toast><visual><binding template=\"ToastText01\"><text id=\"1\">$(message)</text></binding></visual></toast>"))
            _ = try await h.register(Entry.windows("https://wns.example/2", tags: "b"))

            // Native apple to "b && !a": b only (its duplicate handle is skipped), not gcm/fcm/templates/windows.
            let (sent, id) = try await h.send(format: "apple", body: Self.alert, tags: "b && !a", headers: [("apns-push-type", "alert"), ("apns-priority", "10")])
            #expect(sent.status == 201)
            #expect(sent.body.isEmpty)
            #expect(sent.header("Content-Type") == "application/xml; charset=utf-8")
            #expect(sent.header("TrackingId") != nil)
            let location = try #require(sent.header("Location"))
            #expect(location.hasPrefix("https://127.0.0.1:\(h.emulator.port)/herald/messages/"))
            let nid = try #require(id)
            #expect(nid.range(of: #"^[0-9a-f]{32}-\d{14}-\d+-\d+$"#, options: .regularExpression) != nil)
            let deliveries = try await h.deliveries(notificationId: nid)
            #expect(deliveries.count == 1)
            let d = try #require(deliveries.first)
            #expect(d["registrationId"] as? String == b)
            #expect(d["registrationId"] as? String != bDuplicate)
            #expect(d["platform"] as? String == "apns")
            #expect(d["format"] as? String == "apple")
            #expect(d["tagExpression"] as? String == "b && !a")
            #expect(d["pnsHandle"] as? String == apnsToken(2))
            #expect(d["payload"] as? String == Self.alert)
            #expect(d["installationId"] is NSNull)
            #expect((d["headers"] as? [String: String]) == ["apns-push-type": "alert", "apns-priority": "10"])
            let at = try #require(d["at"] as? String)
            #expect(at.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"#, options: .regularExpression) != nil)

            // Telemetry: Completed, 1 success and 1 skipped on APNs.
            let telemetry = try await h.call(.GET, "/messages/\(nid)")
            #expect(telemetry.status == 200)
            #expect(telemetry.body.between("<State>", "</State>") == "Completed")
            #expect(telemetry.body.contains("<ApnsOutcomeCounts><Outcome><Name>Skipped</Name><Count>1</Count></Outcome><Outcome><Name>Success</Name><Count>1</Count></Outcome></ApnsOutcomeCounts>"))
            #expect(telemetry.body.between("<NotificationId>", "</NotificationId>") == nid)

            // OR list: a and b (b's duplicate skipped) → 2 deliveries.
            let (_, orId) = try await h.send(format: "apple", body: Self.alert, tags: "a||b")
            #expect(Set(try await h.deliveries(notificationId: orId).compactMap { $0["registrationId"] as? String }) == [a, b])

            // fcmv1 broadcast: only the FCM v1 native registration.
            let (_, fcmId) = try await h.send(format: "fcmv1", body: #"{"message":{"notification":{"title":"t"}}}"#)
            #expect(try await h.deliveries(notificationId: fcmId).compactMap { $0["registrationId"] as? String } == [v1])

            // Template send: every template registration matching, each rendered for its platform.
            let (_, tId) = try await h.send(format: "template", body: #"{"message":"Hi <you>","count":"7","expiry":"2030-01-01T00:00:00Z"}"#, tags: "b || c")
            let rendered = try await h.deliveries(notificationId: tId)
            #expect(rendered.count == 2)
            let apple = try #require(rendered.first { $0["registrationId"] as? String == appleTemplate })
            #expect(apple["payload"] as? String == #"{"aps":{"alert":"Hi <you>","badge":7}}"#)
            #expect(apple["format"] as? String == "template")
            #expect((apple["headers"] as? [String: String]) == ["apns-push-type": "alert", "apns-expiration": "1893456000"])
            let windows = try #require(rendered.first { $0["registrationId"] as? String == windowsTemplate })
            #expect(windows["platform"] as? String == "wns")
            #expect(windows["payload"] as? String == "<toast><visual><binding template=\"ToastText01\"><text id=\"1\">Hi &lt;you&gt;</text></binding></visual></toast>")
            #expect((windows["headers"] as? [String: String])?["x-wns-type"] == "wns/toast")
            let templateTelemetry = try await h.call(.GET, "/messages/\(try #require(tId))")
            #expect(templateTelemetry.body.contains("<TargetPlatforms>appletemplate,windowstemplate</TargetPlatforms>")
                || templateTelemetry.body.contains("<TargetPlatforms>windowstemplate,appletemplate</TargetPlatforms>"))

            // No target: 201 all the same; telemetry NoTargetFound; nothing delivered.
            let (none, noneId) = try await h.send(format: "apple", body: Self.alert, tags: "nobody")
            #expect(none.status == 201)
            #expect(try await h.deliveries(notificationId: noneId).isEmpty)
            #expect(try await h.call(.GET, "/messages/\(try #require(noneId))").body.between("<State>", "</State>") == "NoTargetFound")

            // Windows native needs X-WNS-Type.
            #expect(try await h.send(format: "windows", body: "<toast/>", tags: "b").0.status == 400)
            let (wns, wnsId) = try await h.send(format: "windows", body: "<toast/>", tags: "b", headers: [("X-WNS-Type", "wns/toast")])
            #expect(wns.status == 201)
            #expect((try await h.deliveries(notificationId: wnsId).first?["headers"] as? [String: String]) == ["x-wns-type": "wns/toast", "content-type": "text/xml"])
        }
    }

    @Test("Bad sends → 400; bodies over 64 KB → 413; over the PNS limit → InvalidNotificationSize")
    func validation() async throws {
        try await Harness.with { h in
            _ = try await h.register(Entry.apple(apnsToken(1), tags: "a"))
            #expect(try await h.call(.POST, "/messages", headers: [("Content-Type", "application/json")], body: Self.alert).status == 400)  // no format
            #expect(try await h.send(format: "nokia", body: Self.alert).0.status == 400)
            #expect(try await h.send(format: "apple", body: "not json").0.status == 400)
            #expect(try await h.send(format: "fcmv1", body: #"{"data":{}}"#).0.status == 400)
            #expect(try await h.send(format: "template", body: #"{"a":{"b":"c"}}"#).0.status == 400)
            #expect(try await h.send(format: "apple", body: Self.alert, tags: "a && (b").0.status == 400)
            let tooManyTags = (1...21).map { "t\($0)" }.joined(separator: "||")
            let limit = try await h.send(format: "apple", body: Self.alert, tags: tooManyTags)
            #expect(limit.0.status == 400)
            #expect(limit.0.errorCode == "400")
            // No api-version → 400.
            let noVersion = try await h.raw(.POST, "/herald/messages", headers: [("ServiceBusNotification-Format", "apple")], body: Self.alert, authorization: h.token())
            #expect(noVersion.status == 400)

            let huge = #"{"aps":{"alert":""# + String(repeating: "x", count: 70_000) + #""}}"#
            let tooLarge = try await h.send(format: "apple", body: huge, tags: "a")
            #expect(tooLarge.0.status == 413)
            #expect(tooLarge.0.errorCode == "413")

            let big = #"{"aps":{"alert":""# + String(repeating: "x", count: 5000) + #""}}"#
            let (accepted, id) = try await h.send(format: "apple", body: big, tags: "a")
            #expect(accepted.status == 201)
            #expect(try await h.deliveries(notificationId: id).isEmpty)
            let telemetry = try await h.call(.GET, "/messages/\(try #require(id))")
            #expect(telemetry.body.contains("<Name>InvalidNotificationSize</Name><Count>1</Count>"))
            #expect(try await h.call(.GET, "/messages/unknown-id").status == 404)
        }
    }

    @Test("Direct, batch and test sends")
    func directBatchTest() async throws {
        try await Harness.with { h in
            // Direct: one delivery to the handle, no registration; Location keeps &direct.
            let (direct, directId) = try await h.send(
                format: "gcm", body: #"{"data":{"m":"x"}}"#, headers: [("ServiceBusNotification-DeviceHandle", "device-1")], query: "direct")
            #expect(direct.status == 201)
            #expect(direct.header("Location")?.hasSuffix("?api-version=2020-06&direct") == true)
            let d = try await h.deliveries(notificationId: directId)
            #expect(d.count == 1)
            #expect(d.first?["pnsHandle"] as? String == "device-1")
            #expect(d.first?["registrationId"] is NSNull)
            #expect(d.first?["platform"] as? String == "gcm")
            #expect(try await h.send(format: "gcm", body: #"{"data":{}}"#, query: "direct=true").0.status == 400)  // no handle

            // Batch: multipart/mixed with the JS SDK's spacing and single-quoted devices.
            let boundary = "nh-boundary-1234"
            let multipart = [
                "--\(boundary)", "Content-type: application/json; charset=utf-8", "Content-Disposition: inline; name=notification", "",
                Self.alert, "--\(boundary)", "Content-Type: application/json; charset=utf-8", "Content-Disposition: inline; name=devices", "",
                "['\(apnsToken(1))','\(apnsToken(2))','\(apnsToken(3))']", "--\(boundary)--", "",
            ].joined(separator: "\r\n")
            let batch = try await h.call(
                .POST, "/messages/$batch", query: "direct",
                headers: [("ServiceBusNotification-Format", "apple"), ("Content-Type", "multipart/mixed; boundary = \"\(boundary)\"")], body: multipart)
            #expect(batch.status == 201, "\(batch.body)")
            let batchId = try #require(batch.header("Location")?.between("/messages/", "?"))
            let batchDeliveries = try await h.deliveries(notificationId: batchId)
            #expect(batchDeliveries.compactMap { $0["pnsHandle"] as? String } == [apnsToken(1), apnsToken(2), apnsToken(3)])
            #expect(batchDeliveries.allSatisfy { $0["payload"] as? String == Self.alert })
            #expect(try await h.call(.POST, "/messages/$batch", headers: [("ServiceBusNotification-Format", "apple"), ("Content-Type", "multipart/mixed; boundary=x")], body: multipart).status == 400)

            // Test send: synchronous NotificationOutcome, at most 10 devices.
            for n in 1...12 { _ = try await h.register(Entry.apple(apnsToken(10 + n), tags: "many")) }
            let (test, _) = try await h.send(format: "apple", body: Self.alert, tags: "many", query: "test")
            #expect(test.status == 201)
            #expect(test.body.hasPrefix("<NotificationOutcome"))
            #expect(test.body.between("<Success>", "</Success>") == "10")
            #expect(test.body.between("<Failure>", "</Failure>") == "0")
            #expect(test.body.all(between: "<RegistrationResult>", "</RegistrationResult>").count == 10)
            #expect(test.body.contains("<Outcome>The Notification was successfully sent to the Push Notification System</Outcome>"))
            let (emptyTest, _) = try await h.send(format: "apple", body: Self.alert, tags: "nobody", query: "test")
            #expect(emptyTest.body.contains("<Success>0</Success><Failure>0</Failure><Results/>"))
        }
    }

    @Test("Scheduled sends: fire when due, stay Scheduled until then, cancel")
    func scheduled() async throws {
        try await Harness.with { h in
            let registration = try await h.register(Entry.apple(apnsToken(1), tags: "a"))
            func schedule(_ date: Date, _ format: (Date) -> String) async throws -> (HTTPResult, String?) {
                let result = try await h.call(
                    .POST, "/schedulednotifications",
                    headers: [
                        ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "a"),
                        ("ServiceBusNotification-ScheduleTime", format(date)), ("Content-Type", "application/json"),
                    ], body: Self.alert)
                return (result, result.header("Location")?.between("/schedulednotifications/", "?"))
            }
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let dotNetFormat: (Date) -> String = { String(formatter.string(from: $0).prefix(19)) }  // yyyy-MM-ddTHH:mm:ss, no zone

            // Due already (one second ago): delivered on the next look.
            let (past, pastId) = try await schedule(Date().addingTimeInterval(-1), dotNetFormat)
            #expect(past.status == 201)
            let id = try #require(pastId)
            #expect(id.contains("_") && id.contains("-"))
            let delivered = try await h.deliveries(notificationId: id)
            #expect(delivered.count == 1)
            #expect(delivered.first?["registrationId"] as? String == registration)
            #expect(try await h.call(.GET, "/messages/\(id)").body.between("<State>", "</State>") == "Completed")

            // An hour ahead (JS format): Scheduled, then cancelled.
            let (future, futureId) = try await schedule(Date().addingTimeInterval(3600), { formatter.string(from: $0) })
            #expect(future.status == 201)
            let fid = try #require(futureId)
            #expect(try await h.call(.GET, "/messages/\(fid)").body.between("<State>", "</State>") == "Scheduled")
            #expect(try await h.call(.DELETE, "/schedulednotifications/\(fid)").status == 200)
            #expect(try await h.call(.DELETE, "/schedulednotifications/\(fid)").status == 404)
            #expect(try await h.call(.GET, "/messages/\(fid)").body.between("<State>", "</State>") == "Cancelled")
            #expect(try await h.deliveries(notificationId: fid).isEmpty)

            // More than 7 days ahead, or no/invalid time → 400.
            #expect(try await schedule(Date().addingTimeInterval(8 * 86400), dotNetFormat).0.status == 400)
            #expect(try await schedule(Date(), { _ in "tomorrow" }).0.status == 400)
        }
    }

    @Test("Free and basic tiers answer 403 to telemetry and scheduled sends; free also to batch")
    func tiers() async throws {
        for tier in [EmulatorTier.free, .basic] {
            try await Harness.with(configuration: EmulatorConfiguration(tier: tier)) { h in
                let (sent, id) = try await h.send(format: "apple", body: Self.alert)
                #expect(sent.status == 201)
                let telemetry = try await h.call(.GET, "/messages/\(try #require(id))")
                #expect(telemetry.status == 403)
                #expect(telemetry.header("Retry-After") == nil)
                let scheduled = try await h.call(
                    .POST, "/schedulednotifications",
                    headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-ScheduleTime", "2099-01-01T00:00:00")], body: Self.alert)
                #expect(scheduled.status == 403)
                let multipart = "--b\r\nContent-Disposition: inline; name=notification\r\n\r\n\(Self.alert)\r\n--b\r\nContent-Disposition: inline; name=devices\r\n\r\n[\"AB\"]\r\n--b--\r\n"
                let batch = try await h.call(
                    .POST, "/messages/$batch", query: "direct",
                    headers: [("ServiceBusNotification-Format", "apple"), ("Content-Type", "multipart/mixed; boundary=b")], body: multipart)
                #expect(batch.status == (tier == .free ? 403 : 201))
            }
        }
    }

    @Test("Telemetry answers 404 during the configured delay, then the outcome")
    func telemetryDelay() async throws {
        // Long enough that a loaded machine still makes its first GET inside the delay.
        let delay = Duration.seconds(2)
        try await Harness.with(configuration: EmulatorConfiguration(telemetryDelay: delay)) { h in
            let sentAt = ContinuousClock.now
            let (_, id) = try await h.send(format: "apple", body: Self.alert)
            let nid = try #require(id)
            // Ask until the telemetry appears (the behaviour under test is time-based). The
            // emulator's delay starts after `sentAt`, so the first non-404 answer must arrive
            // at least `delay` after it; a machine slow enough that the first read itself comes
            // later cannot tell, and only then does this test check less.
            var later = try await h.call(.GET, "/messages/\(nid)")
            while later.status == 404 && ContinuousClock.now - sentAt < delay + .seconds(10) {
                try await Task.sleep(for: .milliseconds(100))
                later = try await h.call(.GET, "/messages/\(nid)")
            }
            #expect(ContinuousClock.now - sentAt >= delay, "telemetry appeared before the delay")
            #expect(later.status == 200)
            #expect(later.body.between("<State>", "</State>") == "NoTargetFound")
        }
    }

    @Test("The request log omits Authorization and carries status and notification id")
    func requestLog() async throws {
        try await Harness.with { h in
            let (_, id) = try await h.send(format: "apple", body: Self.alert, headers: [("TrackingId", "abc")])
            _ = try await h.call(.GET, "/registrations/nope")
            let requests = try await h.inspect(.GET, "/requests").jsonArray
            #expect(requests.count == 2)
            let send = try #require(requests.first)
            #expect(send["method"] as? String == "POST")
            #expect(send["path"] as? String == "/herald/messages")
            #expect(send["query"] as? String == "api-version=2020-06")
            #expect(send["status"] as? Int == 201)
            #expect(send["notificationId"] as? String == id)
            let headers = try #require(send["headers"] as? [String: String])
            #expect(headers["TrackingId"] == "abc")
            #expect(!headers.keys.contains { $0.lowercased() == "authorization" })
            #expect(requests[1]["status"] as? Int == 404)
            #expect(requests[1]["notificationId"] is NSNull)
            #expect(try await h.inspect(.DELETE, "/requests").status == 204)
            #expect(try await h.inspect(.GET, "/requests").jsonArray.isEmpty)
            #expect(try await h.inspect(.DELETE, "/deliveries").status == 204)
            #expect(try await h.inspect(.GET, "/nothing").status == 404)
            #expect(try await h.raw(.GET, "/_emulator/hubs/nohub/deliveries").status == 404)
        }
    }
}

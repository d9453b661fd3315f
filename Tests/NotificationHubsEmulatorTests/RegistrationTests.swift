import Foundation
import NotificationHubsEmulator
import Testing

/// Registrations over HTTP (reference §2.2–2.5, §8).
@Suite("Registrations")
struct RegistrationTests {
    static let atom = [("Content-Type", "application/atom+xml;type=entry;charset=utf-8")]

    @Test("registrationIDs → 201 with an absolute https Location the SDKs can parse")
    func createId() async throws {
        try await Harness.with { h in
            let result = try await h.call(.POST, "/registrationIDs")
            #expect(result.status == 201)
            #expect(result.body.isEmpty)
            let location = try #require(result.header("Location"))
            #expect(location.hasPrefix("https://127.0.0.1:\(h.emulator.port)/herald/registrationids/"))
            #expect(location.hasSuffix("?api-version=2020-06"))
            // .NET: 4 segments, segment 2 "registrationids/"; id shaped <19>-<19>-<1>.
            let path = try #require(URL(string: location)).path
            let segments = path.split(separator: "/")
            #expect(segments.count == 3 && segments[1] == "registrationids")
            let id = String(segments[2])
            #expect(id.range(of: #"^\d{19}-\d{19}-\d$"#, options: .regularExpression) != nil)
        }
    }

    @Test("Create-or-update, get, If-Match, delete round trip")
    func roundTrip() async throws {
        try await Harness.with { h in
            let token = apnsToken(0xAB).lowercased()
            // POST /registrations: 200 (not 201), ETag 1, Content-Location.
            let created = try await h.call(.POST, "/registrations", headers: Self.atom, body: Entry.wrap(Entry.apple(token, tags: "myTag, username:alice")))
            #expect(created.status == 200)
            #expect(created.header("ETag") == "W/\"1\"")
            #expect(created.header("Content-Type") == "application/atom+xml; type=entry; charset=utf-8")
            let id = try #require(created.body.between("<RegistrationId>", "</RegistrationId>"))
            #expect(created.header("Content-Location")?.contains("/herald/registrations/\(id)?api-version=2020-06") == true)
            #expect(created.body.contains("a:etag=\"W/&quot;1&quot;\""))
            #expect(created.body.contains("<ETag>1</ETag>"))
            #expect(created.body.contains("<ExpirationTime>9999-12-31T23:59:59.999</ExpirationTime>"))
            // Tags trimmed and joined without spaces; token upper-cased; canonical order.
            #expect(created.body.contains("<Tags>myTag,username:alice</Tags>"))
            #expect(created.body.contains("<DeviceToken>\(token.uppercased())</DeviceToken>"))
            let order = ["<ETag>", "<ExpirationTime>", "<RegistrationId>", "<Tags>", "<DeviceToken>"].map { created.body.range(of: $0)!.lowerBound }
            #expect(order == order.sorted())

            // PUT without If-Match overwrites everything: ETag 2, 200.
            let updated = try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom, body: Entry.wrap(Entry.apple(token, tags: "other")))
            #expect(updated.status == 200)
            #expect(updated.header("ETag") == "W/\"2\"")
            #expect(updated.body.contains("<Tags>other</Tags>"))
            #expect(updated.header("Content-Location") == nil)

            // If-Match: quoted, weak and * forms; a mismatch is 412.
            for (ifMatch, status) in [("\"1\"", 412), ("W/\"2\"", 200), ("\"3\"", 200), ("*", 200), ("W/\"9\"", 412)] {
                let result = try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom + [("If-Match", ifMatch)], body: Entry.wrap(Entry.apple(token)))
                #expect(result.status == status, "If-Match \(ifMatch)")
            }
            let got = try await h.call(.GET, "/registrations/\(id)")
            #expect(got.status == 200)
            #expect(got.header("ETag") == "W/\"5\"")
            #expect(!got.body.contains("<Tags>"))

            // Delete with a stale ETag → 412; with * → 200; again → 404; GET → 404 with an empty detail.
            #expect(try await h.call(.DELETE, "/registrations/\(id)", headers: [("If-Match", "\"1\"")]).status == 412)
            let deleted = try await h.call(.DELETE, "/registrations/\(id)", headers: [("If-Match", "*")])
            #expect(deleted.status == 200)
            #expect(deleted.body.isEmpty)
            #expect(try await h.call(.DELETE, "/registrations/\(id)", headers: [("If-Match", "*")]).status == 404)
            let missing = try await h.call(.GET, "/registrations/\(id)")
            #expect(missing.status == 404)
            #expect(missing.errorDetail?.hasPrefix(".TrackingId:") == true)
            // PUT with If-Match on a missing id is 404; without it the id is created again.
            #expect(try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom + [("If-Match", "*")], body: Entry.wrap(Entry.apple(token))).status == 404)
            #expect(try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom, body: Entry.wrap(Entry.apple(token))).header("ETag") == "W/\"1\"")
        }
    }

    @Test("Every platform round-trips; FCM legacy is returned as GCM; templates echo nil fields")
    func platforms() async throws {
        try await Harness.with { h in
            let fcm = "<FcmRegistrationDescription \(Entry.ns)><RegistrationId i:nil=\"true\"/><Tags>t1</Tags><FcmRegistrationId>fcm-token</FcmRegistrationId></FcmRegistrationDescription>"
            let fcmId = try await h.register(fcm)
            let fcmGot = try await h.call(.GET, "/registrations/\(fcmId)")
            #expect(fcmGot.body.contains("<GcmRegistrationDescription"))
            #expect(fcmGot.body.contains("<GcmRegistrationId>fcm-token</GcmRegistrationId>"))

            let template = Entry.appleTemplate(apnsToken(1), tags: "t1", body: #"{"aps":{"alert":"$(message)"}}"#)
            let templateId = try await h.register(template)
            let got = try await h.call(.GET, "/registrations/\(templateId)")
            #expect(got.body.contains("<AppleTemplateRegistrationDescription"))
            #expect(got.body.contains(#"<BodyTemplate><![CDATA[{"aps":{"alert":"$(message)"}}]]></BodyTemplate>"#))
            #expect(got.body.contains("<Expiry i:nil=\"true\"/>"))
            #expect(got.body.contains("<ApnsHeaders/>"))

            for description in [
                Entry.gcm("gcm-1"), Entry.fcmV1("v1-1", tags: "a"),
                Entry.fcmV1Template("v1-2", tags: nil, body: #"{"message":{"android":{"data":{"m":"$(m)"}}}}"#),
                Entry.windows("https://db5.notify.windows.com/?token=x"),
                Entry.windowsTemplate("https://db5.notify.windows.com/?token=y", tags: "b", body: "<toast><visual><binding template=\"ToastText01\"><text id=\"1\">$(m)</text></binding></visual></toast>"),
                // Any element order is accepted.
                "<AppleRegistrationDescription \(Entry.ns)><DeviceToken>ABCD</DeviceToken><Tags>z</Tags></AppleRegistrationDescription>",
            ] {
                let id = try await h.register(description)
                #expect(try await h.call(.GET, "/registrations/\(id)").status == 200)
            }
            // An XML declaration and an <updated> element (JS) are accepted.
            let updatedEntry = "<?xml version=\"1.0\" encoding=\"utf-8\"?><entry xmlns=\"http://www.w3.org/2005/Atom\"><updated>2024-01-01T00:00:00Z</updated><content type=\"application/xml\">\(Entry.gcm("gcm-2"))</content></entry>"
            #expect(try await h.call(.POST, "/registrations", headers: Self.atom, body: updatedEntry).status == 200)

            let all = try await h.inspect(.GET, "/registrations").jsonArray
            #expect(all.count == 9)
            #expect(Set(all.compactMap { $0["platform"] as? String }) == ["gcm", "apns", "fcmv1", "wns"])
        }
    }

    @Test("Invalid registrations → 400")
    func invalid() async throws {
        try await Harness.with { h in
            let bad = [
                "not xml",
                Entry.wrap("<UnknownRegistrationDescription \(Entry.ns)/>"),
                Entry.wrap(Entry.apple("XYZ")),  // not hex
                Entry.wrap(Entry.apple("ABC")),  // odd length
                Entry.wrap(Entry.apple(apnsToken(1), tags: "has space")),
                Entry.wrap(Entry.apple(apnsToken(1), tags: (1...61).map { "t\($0)" }.joined(separator: ","))),
                Entry.wrap("<AppleTemplateRegistrationDescription \(Entry.ns)><DeviceToken>AB</DeviceToken></AppleTemplateRegistrationDescription>"),
                Entry.wrap(Entry.appleTemplate(apnsToken(1), tags: nil, body: #"{"a":".(x)"}"#)),
                Entry.wrap("<WindowsTemplateRegistrationDescription \(Entry.ns)><ChannelUri>https://x</ChannelUri><BodyTemplate>&lt;toast/&gt;</BodyTemplate></WindowsTemplateRegistrationDescription>"),
                Entry.wrap("<GcmRegistrationDescription \(Entry.ns)><Tags>a</Tags></GcmRegistrationDescription>"),
            ]
            for body in bad {
                let result = try await h.call(.POST, "/registrations", headers: Self.atom, body: body)
                #expect(result.status == 400, "\(body)")
                #expect(result.errorCode == "400")
            }
        }
    }

    @Test("Listing: all, by channel ($filter), by tag, with continuation tokens")
    func listing() async throws {
        try await Harness.with { h in
            var ids: [String] = []
            for n in 1...5 {
                ids.append(try await h.register(Entry.apple(apnsToken(n), tags: n % 2 == 0 ? "even,all" : "odd,all")))
            }
            let duplicate = try await h.register(Entry.apple(apnsToken(3), tags: "dup"))
            let gcm = try await h.register(Entry.gcm("gcm-token", tags: "all"))

            // Pages of 2 in creation order; the token is opaque and already percent-encoded, as the
            // service's (`MzEobik7Mg%3D%3D`); the last page has none.
            var seen: [String] = []
            var token: String?
            var pages = 0
            repeat {
                let query = "$top=2" + (token.map { "&continuationtoken=\($0)" } ?? "")
                let page = try await h.call(.GET, "/registrations", query: query)
                #expect(page.status == 200)
                #expect(page.header("Content-Type") == "application/atom+xml; type=feed; charset=utf-8")
                seen += page.body.all(between: "<RegistrationId>", "</RegistrationId>")
                token = page.header("X-MS-ContinuationToken")
                if let token {
                    #expect(token.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "%") })
                    #expect(page.body.contains("rel=\"next\""))
                }
                pages += 1
            } while token != nil && pages < 10
            #expect(seen == ids + [duplicate, gcm])
            #expect(pages == 4)

            // By channel: the generic ChannelUri form matches every platform; DeviceToken ignores case.
            let byChannel = try await h.call(.GET, "/registrations", query: "$filter=ChannelUri+eq+%27\(apnsToken(3))%27&$top=100")
            #expect(Set(byChannel.body.all(between: "<RegistrationId>", "</RegistrationId>")) == [ids[2], duplicate])
            let byToken = try await h.call(.GET, "/registrations", query: "$filter=deviceToken+eq+%27\(apnsToken(3).lowercased())%27")
            #expect(byToken.body.all(between: "<RegistrationId>", "</RegistrationId>").count == 2)
            let byGcm = try await h.call(.GET, "/registrations", query: "$filter=GcmRegistrationId%20eq%20'gcm-token'")
            #expect(byGcm.body.all(between: "<RegistrationId>", "</RegistrationId>") == [gcm])
            // No match → 200 with an empty feed.
            let none = try await h.call(.GET, "/registrations", query: "$filter=ChannelUri+eq+%27nothing%27")
            #expect(none.status == 200)
            #expect(none.body.contains("<feed") && !none.body.contains("<entry"))
            // Unsupported filter → 400.
            #expect(try await h.call(.GET, "/registrations", query: "$filter=Tags+eq+%27x%27").status == 400)

            // By tag.
            let even = try await h.call(.GET, "/tags/even/registrations", query: "$top=100")
            #expect(even.body.all(between: "<RegistrationId>", "</RegistrationId>") == [ids[1], ids[3]])
            #expect(try await h.call(.GET, "/tags/nosuchtag/registrations").body.all(between: "<RegistrationId>", "</RegistrationId>").isEmpty)
        }
    }

    @Test("Expire through the inspection API → the next update answers 410")
    func expire() async throws {
        try await Harness.with { h in
            let id = try await h.register(Entry.apple(apnsToken(7), tags: "x"))
            #expect(try await h.inspect(.POST, "/registrations/\(id)/expire").status == 204)
            #expect(try await h.inspect(.POST, "/registrations/nosuchid/expire").status == 404)
            let put = try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom, body: Entry.wrap(Entry.apple(apnsToken(7))))
            #expect(put.status == 410)
            #expect(put.errorDetail?.hasPrefix("Cannot use specified location. Use a different registration ID.") == true)
            #expect(try await h.call(.GET, "/registrations/\(id)").status == 404)
            #expect(try await h.inspect(.GET, "/registrations").jsonArray.isEmpty)
            // A new id works.
            #expect(try await h.register(Entry.apple(apnsToken(7))) != id)
        }
    }

    @Test("Deleted ids answer 410 when configured")
    func goneAfterDelete() async throws {
        try await Harness.with(configuration: EmulatorConfiguration(deletedRegistrationsAreGone: true)) { h in
            let id = try await h.register(Entry.apple(apnsToken(1)))
            #expect(try await h.call(.DELETE, "/registrations/\(id)", headers: [("If-Match", "*")]).status == 200)
            #expect(try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom, body: Entry.wrap(Entry.apple(apnsToken(1)))).status == 410)
        }
    }

    @Test("A registration TTL expires registrations: 404 on read, 410 on update, skipped by sends")
    func timeToLive() async throws {
        let configuration = EmulatorConfiguration(hubs: [EmulatedHubConfiguration(name: "herald", registrationTimeToLive: .milliseconds(400))])
        try await Harness.with(configuration: configuration) { h in
            let created = try await h.call(.POST, "/registrations", headers: Self.atom, body: Entry.wrap(Entry.apple(apnsToken(2), tags: "t")))
            let id = try #require(created.body.between("<RegistrationId>", "</RegistrationId>"))
            let expiration = try #require(created.body.between("<ExpirationTime>", "</ExpirationTime>"))
            #expect(expiration.hasSuffix("Z") && !expiration.hasPrefix("9999"))
            try await Task.sleep(for: .milliseconds(450))  // the behaviour under test is time-based
            #expect(try await h.call(.GET, "/registrations/\(id)").status == 404)
            #expect(try await h.call(.PUT, "/registrations/\(id)", headers: Self.atom, body: Entry.wrap(Entry.apple(apnsToken(2)))).status == 410)
            let (_, nid) = try await h.send(format: "apple", body: #"{"aps":{}}"#, tags: "t")
            #expect(try await h.deliveries(notificationId: nid).isEmpty)
        }
    }
}

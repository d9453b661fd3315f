import AsyncHTTPClient
import Foundation
import NIOCore
import NotificationHubsEmulator
import Testing

/// Per-handle PNS outcomes (`/_emulator/hubs/{hub}/handles`), telemetry's `PnsErrorDetailsUri`
/// and the signed blob behind it (reference §2.8–2.9).
@Suite("Handle outcomes")
struct HandleOutcomeTests {
    static let alert = #"{"aps":{"alert":"Hello"}}"#

    func mark(_ h: Harness, _ handle: String, _ outcome: String) async throws {
        let answer = try await h.inspect(.POST, "/handles", body: #"{"handle":"\#(handle)","outcome":"\#(outcome)"}"#)
        #expect(answer.status == 204, "\(answer.body)")
    }

    /// The `<PnsErrorDetailsUri>` of a notification's telemetry, XML entities decoded.
    func errorDetailsURI(_ h: Harness, _ id: String, apiVersion: String = "2020-06") async throws -> String? {
        let telemetry = try await h.raw(
            .GET, "/\(h.hub)/messages/\(id)?api-version=\(apiVersion)", authorization: h.token())
        #expect(telemetry.status == 200)
        return telemetry.body.between("<PnsErrorDetailsUri>", "</PnsErrorDetailsUri>")?.replacingOccurrences(of: "&amp;", with: "&")
    }

    /// GETs an absolute URL with no Authorization header.
    func fetch(_ url: String, _ h: Harness) async throws -> HTTPResult {
        let prefix = try #require(url.range(of: "127.0.0.1:\(h.emulator.port)"))
        return try await h.raw(.GET, String(url[prefix.upperBound...]))
    }

    @Test("A marked handle counts its outcome instead of Success, gets no delivery, and shows in the signed error blob")
    func nativeTagSend() async throws {
        try await Harness.with { h in
            let ok = try await h.register(Entry.apple(apnsToken(1), tags: "news"))
            let expired = try await h.register(Entry.apple(apnsToken(2), tags: "news"))
            let wrong = try await h.register(Entry.apple(apnsToken(3), tags: "news"))
            try await mark(h, apnsToken(2).lowercased(), "ExpiredChannel")  // handles match case-insensitively
            try await mark(h, apnsToken(3), "wrongtoken")  // outcome names too, stored canonically
            let marks = try await h.inspect(.GET, "/handles").jsonArray
            #expect(Set(marks.compactMap { $0["outcome"] as? String }) == ["ExpiredChannel", "WrongToken"])

            let (_, sent) = try await h.send(format: "apple", body: Self.alert, tags: "news")
            let id = try #require(sent)
            let deliveries = try await h.deliveries(notificationId: id)
            #expect(deliveries.compactMap { $0["registrationId"] as? String } == [ok])

            let telemetry = try await h.call(.GET, "/messages/\(id)")
            #expect(
                telemetry.body.contains(
                    "<ApnsOutcomeCounts><Outcome><Name>ExpiredChannel</Name><Count>1</Count></Outcome><Outcome><Name>Success</Name><Count>1</Count></Outcome><Outcome><Name>WrongToken</Name><Count>1</Count></Outcome></ApnsOutcomeCounts><PnsErrorDetailsUri>"
                ), "\(telemetry.body)")
            let uri = try #require(try await errorDetailsURI(h, id))
            #expect(uri.hasPrefix("http://127.0.0.1:\(h.emulator.port)/_pnserrordetails/herald/\(id)?"))
            #expect(uri.contains("&sig="))

            // The blob: no Authorization needed, one PnsFeedback document per line.
            let blob = try await fetch(uri, h)
            #expect(blob.status == 200)
            #expect(blob.header("Content-Type") == "application/octet-stream")
            let lines = blob.body.components(separatedBy: "\r\n")
            #expect(lines.count == 2)
            #expect(lines.allSatisfy { $0.hasPrefix("<?xml version=\"1.0\" encoding=\"utf-16\"?><PnsFeedback ") && $0.hasSuffix("</PnsFeedback>") })
            let byHandle = Dictionary(uniqueKeysWithValues: lines.map { ($0.between("<PnsHandle>", "</PnsHandle>") ?? "", $0) })
            let expiredLine = try #require(byHandle[apnsToken(2)])
            #expect(expiredLine.between("<NotificationSystemError>", "</NotificationSystemError>") == "ExpiredChannel")
            #expect(expiredLine.between("<Platform>", "</Platform>") == "apple")
            #expect(expiredLine.between("<RegistrationId>", "</RegistrationId>") == expired)
            #expect(expiredLine.between("<NotificationId>", "</NotificationId>") == id)
            #expect(expiredLine.between("<FeedbackTime>", "</FeedbackTime>") != nil)
            let wrongLine = try #require(byHandle[apnsToken(3)])
            #expect(wrongLine.between("<NotificationSystemError>", "</NotificationSystemError>") == "WrongToken")
            #expect(wrongLine.between("<RegistrationId>", "</RegistrationId>") == wrong)

            // Like a SAS: a wrong, missing or re-dated signature is refused.
            var tampered = uri
            let sig = try #require(tampered.range(of: "&sig="))
            tampered.replaceSubrange(sig.upperBound..<tampered.index(after: sig.upperBound), with: uri[sig.upperBound] == "A" ? "B" : "A")
            #expect(try await fetch(tampered, h).status == 403)
            #expect(try await fetch(String(uri[..<sig.lowerBound]), h).status == 403)
            let redated = uri.replacingOccurrences(of: "se=", with: "se=1")
            let refused = try await fetch(redated, h)
            #expect(refused.status == 403)
            #expect(refused.body.contains("<Code>AuthenticationFailed</Code>"))
            // Another notification's id under this signature: refused too.
            let (_, other) = try await h.send(format: "apple", body: Self.alert, tags: "news")
            #expect(try await fetch(uri.replacingOccurrences(of: id, with: try #require(other)), h).status == 403)

            // "Success" clears a mark: the handle is delivered to again, and a send without errors has no URI.
            try await mark(h, apnsToken(2), "Success")
            try await mark(h, apnsToken(3), "Success")
            #expect(try await h.inspect(.GET, "/handles").jsonArray.isEmpty)
            let (_, clean) = try await h.send(format: "apple", body: Self.alert, tags: "news")
            let cleanId = try #require(clean)
            #expect(try await h.deliveries(notificationId: cleanId).count == 3)
            #expect(try await errorDetailsURI(h, cleanId) == nil)
        }
    }

    @Test("PnsErrorDetailsUri needs api-version 2016-07 or later on both the send and the telemetry read")
    func apiVersionGate() async throws {
        try await Harness.with { h in
            try await h.register(Entry.gcm("gcm-dead", tags: "t"))
            try await mark(h, "gcm-dead", "BadChannel")
            let old = try await h.raw(
                .POST, "/\(h.hub)/messages?api-version=2015-04",
                headers: [("ServiceBusNotification-Format", "gcm"), ("ServiceBusNotification-Tags", "t")], body: #"{"data":{}}"#,
                authorization: h.token())
            let oldId = try #require(old.header("Location")?.between("/messages/", "?"))
            let oldTelemetry = try await h.call(.GET, "/messages/\(oldId)")
            #expect(oldTelemetry.body.contains("<GcmOutcomeCounts><Outcome><Name>BadChannel</Name><Count>1</Count></Outcome></GcmOutcomeCounts>"))
            #expect(!oldTelemetry.body.contains("PnsErrorDetailsUri"))

            let (_, newId) = try await h.send(format: "gcm", body: #"{"data":{}}"#, tags: "t")
            let id = try #require(newId)
            #expect(try await errorDetailsURI(h, id, apiVersion: "2016-07") != nil)
            #expect(try await errorDetailsURI(h, id, apiVersion: "2015-01") == nil)
        }
    }

    @Test("Template sends to installations, direct and batch sends honour the marks")
    func otherSends() async throws {
        try await Harness.with { h in
            let installation = """
                {"installationId":"inst-1","platform":"fcmv1","pushChannel":"fcm-dead","tags":["t"],
                 "templates":{"msg":{"body":"{\\"message\\":{\\"data\\":{\\"m\\":\\"$(m)\\"}}}"}}}
                """
            #expect(try await h.call(.PUT, "/installations/inst-1", headers: [("Content-Type", "application/json")], body: installation).status == 200)
            try await mark(h, "fcm-dead", "ExpiredChannel")

            let (_, templateId) = try await h.send(format: "template", body: #"{"m":"hi"}"#, tags: "t")
            let tid = try #require(templateId)
            #expect(try await h.deliveries(notificationId: tid).isEmpty)
            let telemetry = try await h.call(.GET, "/messages/\(tid)")
            #expect(telemetry.body.contains("<FcmV1OutcomeCounts><Outcome><Name>ExpiredChannel</Name><Count>1</Count></Outcome></FcmV1OutcomeCounts>"))
            let blob = try await fetch(try #require(try await errorDetailsURI(h, tid)), h)
            #expect(blob.body.between("<InstallationId>", "</InstallationId>") == "inst-1")
            #expect(blob.body.between("<Platform>", "</Platform>") == "fcmv1")

            // Direct: the handle is marked even without a registration.
            let (_, directId) = try await h.send(
                format: "fcmv1", body: #"{"message":{}}"#, headers: [("ServiceBusNotification-DeviceHandle", "fcm-dead")], query: "direct")
            let did = try #require(directId)
            #expect(try await h.deliveries(notificationId: did).isEmpty)
            let directBlob = try await fetch(try #require(try await errorDetailsURI(h, did)), h)
            #expect(directBlob.body.between("<PnsHandle>", "</PnsHandle>") == "fcm-dead")
            #expect(!directBlob.body.contains("<RegistrationId>"))

            // Batch: only the marked handle is held back.
            let boundary = "b"
            let multipart = [
                "--\(boundary)", "Content-Type: application/json", "Content-Disposition: inline; name=notification", "", #"{"message":{}}"#,
                "--\(boundary)", "Content-Type: application/json", "Content-Disposition: inline; name=devices", "",
                #"["fcm-live","fcm-dead"]"#, "--\(boundary)--", "",
            ].joined(separator: "\r\n")
            let batch = try await h.call(
                .POST, "/messages/$batch", query: "direct",
                headers: [("ServiceBusNotification-Format", "fcmv1"), ("Content-Type", "multipart/mixed; boundary=\(boundary)")], body: multipart)
            let bid = try #require(batch.header("Location")?.between("/messages/", "?"))
            #expect(try await h.deliveries(notificationId: bid).compactMap { $0["pnsHandle"] as? String } == ["fcm-live"])
            let batchTelemetry = try await h.call(.GET, "/messages/\(bid)")
            #expect(
                batchTelemetry.body.contains(
                    "<FcmV1OutcomeCounts><Outcome><Name>ExpiredChannel</Name><Count>1</Count></Outcome><Outcome><Name>Success</Name><Count>1</Count></Outcome></FcmV1OutcomeCounts>"
                ))
        }
    }

    @Test("The handles route refuses unknown outcomes and malformed bodies")
    func validation() async throws {
        try await Harness.with { h in
            #expect(try await h.inspect(.POST, "/handles", body: #"{"handle":"x","outcome":"Gone"}"#).status == 400)
            #expect(try await h.inspect(.POST, "/handles", body: #"{"handle":"","outcome":"WrongToken"}"#).status == 400)
            #expect(try await h.inspect(.POST, "/handles", body: "nope").status == 400)
            #expect(try await h.inspect(.DELETE, "/handles").status == 405)
            let list = try await h.inspect(.POST, "/handles", body: #"[{"handle":"a","outcome":"BadChannel"},{"handle":"b","outcome":"Dropped"}]"#)
            #expect(list.status == 204)
            #expect(try await h.inspect(.GET, "/handles").jsonArray.count == 2)
        }
    }

    @Test("The error blob is served without --inspection: a bad signature answers 403, not 404")
    func servedWithoutInspection() async throws {
        let emulator = try await Emulator.start(configuration: EmulatorConfiguration(inspection: false), logger: Harness.logger)
        do {
            let request = HTTPClientRequestBuilder.get(emulator.baseURL + "/_pnserrordetails/herald/some-id?se=99999999999&sig=AAAA")
            let (status, body) = try await request.run()
            #expect(status == 403)
            #expect(body.contains("AuthenticationFailed"))
            let (inspection, _) = try await HTTPClientRequestBuilder.get(emulator.baseURL + "/_emulator/hubs/herald/handles").run()
            #expect(inspection == 404)
        } catch {
            try? await emulator.shutdown()
            throw error
        }
        try await emulator.shutdown()
    }
}

/// A plain GET for an emulator started without the harness.
struct HTTPClientRequestBuilder {
    var url: String

    static func get(_ url: String) -> HTTPClientRequestBuilder { HTTPClientRequestBuilder(url: url) }

    func run() async throws -> (Int, String) {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), String(buffer: body))
    }
}

import Foundation
import NotificationHubsEmulator
import Testing

/// Installations over HTTP (reference §2.6, §8.6–8.7).
@Suite("Installations")
struct InstallationTests {
    static let json = [("Content-Type", "application/json")]

    @Test("PUT, GET, PATCH, DELETE; hidden registrations; sends by $InstallationId/$UserId")
    func lifecycle() async throws {
        try await Harness.with { h in
            let id = "95e4cf2e-0000-4000-8000-000000000001"
            let installation = """
                {"installationId":"\(id)","platform":"apns","pushChannel":"\(apnsToken(0x62))","userId":null,"pushChannelExpired":null,
                 "tags":["tag1","username:alice"],"pushVariables":{"var1":"value1"},
                 "templates":{"alert":{"body":"{\\"aps\\":{\\"alert\\":\\"$(message)\\"}}","tags":["t-extra"]}}}
                """
            let put = try await h.call(.PUT, "/installations/\(id)", headers: Self.json, body: installation)
            #expect(put.status == 200)
            #expect(put.body.isEmpty)
            #expect(put.header("Content-Type") == "application/xml; charset=utf-8")

            let got = try await h.call(.GET, "/installations/\(id)")
            #expect(got.status == 200)
            #expect(got.header("Content-Type") == "application/xml; charset=utf-8")  // JSON labelled as XML, as recorded
            let object = try #require(got.json as? [String: Any])
            #expect(object["installationId"] as? String == id)
            #expect(object["platform"] as? String == "apns")
            #expect(object["pushChannelExpired"] as? Bool == false)
            #expect(object["expirationTime"] as? String == "9999-12-31T23:59:59.9999999Z")
            #expect(object["userId"] == nil)
            #expect(object["tags"] as? [String] == ["tag1", "username:alice"])
            #expect((object["pushVariables"] as? [String: String])?["var1"] == "value1")
            let templates = try #require(object["templates"] as? [String: [String: Any]])
            #expect(Set(templates["alert"]?["tags"] as? [String] ?? []) == ["alert", "t-extra"])

            // Hidden registrations: one native, one per template.
            var registrations = try await h.inspect(.GET, "/registrations").jsonArray
            #expect(registrations.count == 2)
            #expect(registrations.allSatisfy { $0["installationId"] as? String == id })
            let native = try #require(registrations.first { $0["templateName"] is NSNull })
            #expect(native["tags"] as? [String] == ["$InstallationId:{\(id)}", "tag1", "username:alice"])
            let listed = try await h.call(.GET, "/registrations")
            #expect(listed.body.contains("<Tags>$InstallationId:{\(id)},tag1,username:alice</Tags>"))
            #expect(listed.body.contains("9999-12-31T23:59:59.9999999Z"))

            // PATCH: add a tag, set userId → $UserId tag appears.
            let patch = #"[{"op":"add","path":"/tags","value":"tag2"},{"op":"add","path":"/userId","value":"77a8db6e"},{"op":"remove","path":"/tags/tag1"}]"#
            let patched = try await h.call(.PATCH, "/installations/\(id)", headers: [("Content-Type", "application/json-patch+json")], body: patch)
            #expect(patched.status == 200)
            #expect(patched.body.isEmpty)
            let after = try #require(try await h.call(.GET, "/installations/\(id)").json as? [String: Any])
            #expect(after["userId"] as? String == "77a8db6e")
            #expect(after["tags"] as? [String] == ["username:alice", "tag2"])
            registrations = try await h.inspect(.GET, "/registrations").jsonArray
            let nativeAfter = try #require(registrations.first { $0["templateName"] is NSNull })
            #expect(nativeAfter["tags"] as? [String] == ["$InstallationId:{\(id)}", "$UserId:{77a8db6e}", "username:alice", "tag2"])
            #expect(nativeAfter["registrationId"] as? String == native["registrationId"] as? String)

            // Sends reach the installation by its built-in tags; a template send reaches its template.
            let (s1, n1) = try await h.send(format: "apple", body: #"{"aps":{"alert":"native"}}"#, tags: "$UserId:{77a8db6e}")
            #expect(s1.status == 201)
            let d1 = try await h.deliveries(notificationId: n1)
            #expect(d1.count == 1)
            #expect(d1.first?["installationId"] as? String == id)
            #expect(d1.first?["pnsHandle"] as? String == apnsToken(0x62))
            let (_, n2) = try await h.send(format: "template", body: #"{"message":"Hi"}"#, tags: "$InstallationId:{\(id)} && alert")
            let d2 = try await h.deliveries(notificationId: n2)
            #expect(d2.count == 1)
            #expect(d2.first?["payload"] as? String == #"{"aps":{"alert":"Hi"}}"#)

            // Template PATCH, then replace userId and remove it.
            let templatePatch = ##"[{"op":"add","path":"/templates/second","value":"{\"body\":\"{\\\"aps\\\":{\\\"badge\\\":\\\"#(n)\\\"}}\"}"},{"op":"remove","path":"/userId"}]"##
            #expect(try await h.call(.PATCH, "/installations/\(id)", headers: Self.json, body: templatePatch).status == 200)
            registrations = try await h.inspect(.GET, "/registrations").jsonArray
            #expect(registrations.count == 3)
            #expect(!registrations.contains { ($0["tags"] as? [String] ?? []).contains("$UserId:{77a8db6e}") })

            // Bad patches → 400; patch of a missing installation → 404.
            #expect(try await h.call(.PATCH, "/installations/\(id)", headers: Self.json, body: #"[{"op":"move","path":"/tags"}]"#).status == 400)
            #expect(try await h.call(.PATCH, "/installations/\(id)", headers: Self.json, body: #"[{"op":"add","path":"/nope","value":"x"}]"#).status == 400)
            #expect(try await h.call(.PATCH, "/installations/missing", headers: Self.json, body: "[]").status == 404)

            // DELETE → 204, twice; GET → 404 "Installation not found."; hidden registrations gone.
            #expect(try await h.call(.DELETE, "/installations/\(id)").status == 204)
            #expect(try await h.call(.DELETE, "/installations/\(id)").status == 204)
            let missing = try await h.call(.GET, "/installations/\(id)")
            #expect(missing.status == 404)
            #expect(missing.errorDetail?.hasPrefix("Installation not found.") == true)
            #expect(try await h.inspect(.GET, "/registrations").jsonArray.isEmpty)
        }
    }

    @Test("Invalid installations → 400")
    func invalid() async throws {
        try await Harness.with { h in
            let cases = [
                "not json",
                #"{"installationId":"other","platform":"apns","pushChannel":"AB"}"#,
                #"{"installationId":"i1","platform":"nokia","pushChannel":"AB"}"#,
                #"{"installationId":"i1","platform":"apns"}"#,
                #"{"installationId":"i1","platform":"apns","pushChannel":"XYZ"}"#,
                #"{"installationId":"i1","platform":"fcmv1","pushChannel":"t","tags":["bad tag"]}"#,
                #"{"installationId":"i1","platform":"fcmv1","pushChannel":"t","templates":{"x":{"body":"{\"a\":\".(x)\"}"}}}"#,
            ]
            for body in cases {
                let result = try await h.call(.PUT, "/installations/i1", headers: Self.json, body: body)
                #expect(result.status == 400, "\(body): \(result.body)")
            }
            // FCM v1 and browser installations are accepted.
            #expect(try await h.call(.PUT, "/installations/i2", headers: Self.json, body: #"{"installationId":"i2","platform":"FCMV1","pushChannel":"tok"}"#).status == 200)
            let browser = #"{"installationId":"i3","platform":"browser","pushChannel":{"endpoint":"https://push.example/1","p256dh":"k","auth":"a"}}"#
            #expect(try await h.call(.PUT, "/installations/i3", headers: Self.json, body: browser).status == 200)
            let object = try #require(try await h.call(.GET, "/installations/i3").json as? [String: Any])
            #expect((object["pushChannel"] as? [String: String])?["endpoint"] == "https://push.example/1")
        }
    }
}

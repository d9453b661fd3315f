import Foundation
import NotificationHubsEmulator
import Testing

/// The reference's SAS test vectors (§1.3) and the emulator's validation (§1.2).
@Suite("Shared access signatures")
struct SASTests {
    static let tv3Key = "TestKeyForEmulatorOnly0000000000000000000000="
    static let tv3KeyName = "DefaultFullSharedAccessSignature"

    // MARK: The token builders reproduce the vectors exactly (so the tokens below are SDK-shaped).

    @Test("TV1: HMAC-SHA256 with the key as text")
    func tv1() {
        #expect(SASToken.signature("mydata", key: "mysecretkey") == "u0JTQtSbhCo8r7+Yr/RNiJOs7/VwDireHAXovvLBbXo=")
        #expect(
            SASToken.encode("u0JTQtSbhCo8r7+Yr/RNiJOs7/VwDireHAXovvLBbXo=", keep: SASToken.uriComponent, lowerHex: false)
                == "u0JTQtSbhCo8r7%2BYr%2FRNiJOs7%2FVwDireHAXovvLBbXo%3D")
    }

    @Test("TV2: signature over the lower-case-hex sr as sent")
    func tv2() {
        let sr = "https%3a%2f%2fmysvc.servicebus.windows.net%2fmyentity%2fmessages"
        let sig = SASToken.signature("\(sr)\n1476065410", key: "AexamplekeyAEXAMPLEKEYAexamplekeyAEXAMPLEKEY=")
        #expect(SASToken.encode(sig, keep: SASToken.uriComponent, lowerHex: false) == "nQDGh0YxA8O3SFO7SyrmnTK6BnP%2F33KShAbTXFjmYV0%3D")
    }

    @Test("TV3: JS, .NET and Java styles")
    func tv3Styles() {
        #expect(
            SASToken.jsStyle(namespaceURL: "https://contoso.servicebus.windows.net/", keyName: Self.tv3KeyName, key: Self.tv3Key, se: 1_700_000_000)
                == "SharedAccessSignature sr=https%3A%2F%2Fcontoso.servicebus.windows.net%2F&sig=WDeOtJdoEFgHgflj60%2B%2FAL1dUXyuW559rIwV9CKk9Sw%3D&se=1700000000&skn=DefaultFullSharedAccessSignature"
        )
        #expect(
            SASToken.dotNetStyle(
                requestURL: "https://contoso.servicebus.windows.net/myhub/messages?api-version=2020-06", keyName: Self.tv3KeyName,
                key: Self.tv3Key, se: 1_700_000_000)
                == "SharedAccessSignature sr=http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f&sig=zfhyDyGYHEgfrgqz1go%2bSdZZ4h1baI7AGU1oz%2bxkcKw%3d&se=1700000000&skn=DefaultFullSharedAccessSignature"
        )
        #expect(
            SASToken.dotNetStyle(
                requestURL: "https://contoso.servicebus.windows.net/myhub/messages/$batch?api-version=2020-06&direct", keyName: Self.tv3KeyName,
                key: Self.tv3Key, se: 1_700_000_000
            ).contains("sr=http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f%24batch%2f&sig=EbmxEPWVakf0R2BcLnkPAjLcsxXC1Ma62YgirUxQ7ys%3d"))
        #expect(
            SASToken.javaStyle(
                requestURL: "https://contoso.servicebus.windows.net/myhub/registrations?api-version=2020-06", keyName: Self.tv3KeyName,
                key: Self.tv3Key, se: 1_700_000_000
            ).contains("sr=https%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fregistrations%3fapi-version%3d2020-06&sig=03%2FCJATZ5gwKP05YrwmR449m3FzGgv6oFlbiU%2FQSS3E%3D"))
    }

    // MARK: The emulator

    static func tv3Configuration(tls: Bool = false) -> EmulatorConfiguration {
        EmulatorConfiguration(
            hubs: [
                EmulatedHubConfiguration(
                    name: "myhub",
                    rules: [
                        EmulatedAccessRule(name: tv3KeyName, key: tv3Key, rights: [.listen, .send, .manage]),
                        EmulatedAccessRule(name: "DefaultListenSharedAccessSignature", key: "ListenKeyForEmulatorOnly000000000000000000=", rights: [.listen]),
                        EmulatedAccessRule(name: "mykey", key: "AexamplekeyAEXAMPLEKEYAexamplekeyAEXAMPLEKEY=", rights: [.send]),
                    ])
            ],
            tls: tls)
    }

    static let apple = #"{"aps":{"alert":"hi"}}"#
    static let sendHeaders = [("ServiceBusNotification-Format", "apple"), ("Content-Type", "application/json;charset=utf-8")]

    @Test("The reference's verbatim TV3 tokens pass the signature check and fail only on expiry")
    func verbatimVectors() async throws {
        try await Harness.with(configuration: Self.tv3Configuration()) { h in
            let contoso = [("Host", "contoso.servicebus.windows.net")]
            let tokens = [
                ("/myhub/messages?api-version=2020-06",
                 "SharedAccessSignature sr=http%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fmessages%2f&sig=zfhyDyGYHEgfrgqz1go%2bSdZZ4h1baI7AGU1oz%2bxkcKw%3d&se=1700000000&skn=DefaultFullSharedAccessSignature"),
                ("/myhub/messages?api-version=2020-06",
                 "SharedAccessSignature sr=https%3A%2F%2Fcontoso.servicebus.windows.net%2F&sig=WDeOtJdoEFgHgflj60%2B%2FAL1dUXyuW559rIwV9CKk9Sw%3D&se=1700000000&skn=DefaultFullSharedAccessSignature"),
                ("/myhub/registrations?api-version=2020-06",
                 "SharedAccessSignature sr=https%3a%2f%2fcontoso.servicebus.windows.net%2fmyhub%2fregistrations%3fapi-version%3d2020-06&sig=03%2FCJATZ5gwKP05YrwmR449m3FzGgv6oFlbiU%2FQSS3E%3D&se=1700000000&skn=DefaultFullSharedAccessSignature"),
            ]
            for (path, token) in tokens {
                let result = try await h.raw(path.contains("messages") ? .POST : .GET, path, headers: contoso + Self.sendHeaders, body: Self.apple, authorization: token)
                #expect(result.status == 401)
                #expect(result.errorDetail?.hasPrefix("ExpiredToken") == true, "\(result.body)")
            }
            // The same token with one signature character changed is an invalid signature instead.
            let tampered = tokens[0].1.replacingOccurrences(of: "sig=zfhy", with: "sig=Zfhy")
            let result = try await h.raw(.POST, tokens[0].0, headers: contoso + Self.sendHeaders, body: Self.apple, authorization: tampered)
            #expect(result.status == 401)
            #expect(result.errorDetail?.hasPrefix("InvalidSignature") == true)
        }
    }

    @Test("Tokens built in the .NET, JS and Java styles are accepted, in any field order")
    func sdkStyles() async throws {
        try await Harness.with(configuration: Self.tv3Configuration()) { h in
            let se = Harness.inAnHour
            let messages = h.base + "/myhub/messages?api-version=2020-06"
            let registrations = h.base + "/myhub/registrations?api-version=2020-06"
            let sends: [String] = [
                SASToken.dotNetStyle(requestURL: messages, keyName: Self.tv3KeyName, key: Self.tv3Key, se: se),
                SASToken.jsStyle(namespaceURL: h.base + "/", keyName: Self.tv3KeyName, key: Self.tv3Key, se: se),
                SASToken.javaStyle(requestURL: messages, keyName: Self.tv3KeyName, key: Self.tv3Key, se: se),
                SASToken.jsStyle(namespaceURL: h.base + "/myhub", keyName: Self.tv3KeyName, key: Self.tv3Key, se: se),
            ]
            for token in sends {
                let result = try await h.raw(.POST, "/myhub/messages?api-version=2020-06", headers: Self.sendHeaders, body: Self.apple, authorization: token)
                #expect(result.status == 201, "\(token): \(result.body)")
            }
            // Field order does not matter (one docs example puts sig first).
            let sr = SASToken.encode((h.base + "/").lowercased(), keep: SASToken.uriComponent, lowerHex: false)
            let sig = SASToken.encode(SASToken.signature("\(sr)\n\(se)", key: Self.tv3Key), keep: SASToken.uriComponent, lowerHex: false)
            let reordered = SASToken.token(sr: sr, sig: sig, se: se, skn: Self.tv3KeyName, order: ["sig", "skn", "se", "sr"])
            let result = try await h.raw(.POST, "/myhub/messages?api-version=2020-06", headers: Self.sendHeaders, body: Self.apple, authorization: reordered)
            #expect(result.status == 201)
            // Java signs the query too; GET of all registrations.
            let java = SASToken.javaStyle(requestURL: registrations, keyName: Self.tv3KeyName, key: Self.tv3Key, se: se)
            #expect(try await h.raw(.GET, "/myhub/registrations?api-version=2020-06", authorization: java).status == 200)
            // .NET for $batch.
            let batchURL = h.base + "/myhub/messages/$batch?api-version=2020-06&direct"
            let batch = SASToken.dotNetStyle(requestURL: batchURL, keyName: Self.tv3KeyName, key: Self.tv3Key, se: se)
            let multipart = "--b\r\nContent-Type: application/json\r\nContent-Disposition: inline; name=notification\r\n\r\n\(Self.apple)\r\n--b\r\nContent-Type: application/json\r\nContent-Disposition: inline; name=devices\r\n\r\n[\"AA\"]\r\n--b--\r\n"
            let batchResult = try await h.raw(
                .POST, "/myhub/messages/$batch?api-version=2020-06&direct",
                headers: [("ServiceBusNotification-Format", "apple"), ("Content-Type", "multipart/mixed; boundary=\"b\"")], body: multipart,
                authorization: batch)
            #expect(batchResult.status == 201, "\(batchResult.body)")
        }
    }

    @Test("Wrong key, expired token, wrong audience, wrong host, missing token → 401 with the error body")
    func rejections() async throws {
        try await Harness.with(configuration: Self.tv3Configuration()) { h in
            let se = Harness.inAnHour
            let path = "/myhub/messages?api-version=2020-06"
            let cases: [(String?, String)] = [
                (SASToken.jsStyle(namespaceURL: h.base + "/", keyName: Self.tv3KeyName, key: "WrongKey000000000000000000000000000000000000=", se: se), "InvalidSignature"),
                (SASToken.jsStyle(namespaceURL: h.base + "/", keyName: Self.tv3KeyName, key: Self.tv3Key, se: Int(Date().timeIntervalSince1970) - 5), "ExpiredToken"),
                (SASToken.jsStyle(namespaceURL: h.base + "/otherhub", keyName: Self.tv3KeyName, key: Self.tv3Key, se: se), "InvalidAudience"),
                (SASToken.jsStyle(namespaceURL: h.base + "/myhub/registrations", keyName: Self.tv3KeyName, key: Self.tv3Key, se: se), "InvalidAudience"),
                (SASToken.jsStyle(namespaceURL: "https://elsewhere.servicebus.windows.net/", keyName: Self.tv3KeyName, key: Self.tv3Key, se: se), "InvalidAudience"),
                (SASToken.jsStyle(namespaceURL: h.base + "/", keyName: "NoSuchRule", key: Self.tv3Key, se: se), "InvalidSignature"),
                (nil, "MissingToken"),
                ("Bearer abc", "MalformedToken"),
            ]
            for (token, expected) in cases {
                let result = try await h.raw(.POST, path, headers: Self.sendHeaders, body: Self.apple, authorization: token)
                #expect(result.status == 401, "\(expected)")
                #expect(result.errorCode == "401")
                #expect(result.errorDetail?.hasPrefix(expected) == true, "\(expected): \(result.body)")
                #expect(result.errorDetail?.contains(".TrackingId:") == true)
                #expect(result.errorDetail?.contains(",TimeStamp:") == true)
                #expect(result.header("Content-Type") == "application/xml; charset=utf-8")
            }
            #expect(try await h.deliveries().isEmpty)
        }
    }

    @Test("A rule without the right → 403 with an empty body and tracking headers")
    func missingRight() async throws {
        try await Harness.with(configuration: Self.tv3Configuration()) { h in
            let listen = SASToken.jsStyle(
                namespaceURL: h.base + "/", keyName: "DefaultListenSharedAccessSignature", key: "ListenKeyForEmulatorOnly000000000000000000=",
                se: Harness.inAnHour)
            let send = try await h.raw(
                .POST, "/myhub/messages?api-version=2020-06&direct",
                headers: Self.sendHeaders + [("ServiceBusNotification-DeviceHandle", "AA"), ("TrackingId", "11111111-2222-3333-4444-555555555555")],
                body: Self.apple, authorization: listen)
            #expect(send.status == 403)
            #expect(send.body.isEmpty)
            #expect(send.header("TrackingId") == "11111111-2222-3333-4444-555555555555")
            #expect(send.header("x-ms-correlation-request-id") != nil)
            // Listen may not list all registrations (Manage) but may list by handle.
            #expect(try await h.raw(.GET, "/myhub/registrations?api-version=2020-06", authorization: listen).status == 403)
            #expect(try await h.raw(.GET, "/myhub/registrations?api-version=2020-06&$filter=ChannelUri+eq+%27AA%27", authorization: listen).status == 200)
            // A Send-only rule may not register.
            let sendOnly = SASToken.jsStyle(namespaceURL: h.base + "/", keyName: "mykey", key: "AexamplekeyAEXAMPLEKEYAexamplekeyAEXAMPLEKEY=", se: Harness.inAnHour)
            #expect(try await h.raw(.POST, "/myhub/registrationIDs?api-version=2020-06", authorization: sendOnly).status == 403)
            #expect(try await h.raw(.POST, "/myhub/messages?api-version=2020-06", headers: Self.sendHeaders, body: Self.apple, authorization: sendOnly).status == 201)
        }
    }
}

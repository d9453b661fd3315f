import Foundation
import HeraldDomain
import Testing

@Suite("Events")
struct EventTests {
    @Test("an event's JSON (a webhook's body) has sorted keys, ids in lower case and a UTC timestamp with milliseconds")
    func json() throws {
        let event = Event(
            id: "evt_7", seq: "5", type: .notificationFailed, timestamp: Date(timeIntervalSince1970: 1_796_029_923.512),
            data: EventData(notificationId: UUID(uuidString: "0B7F0000-0000-4000-8000-000000000001"), state: "Abandoned"))
        let text = String(decoding: event.json(), as: UTF8.self)
        #expect(
            text
                == #"{"data":{"notificationId":"0b7f0000-0000-4000-8000-000000000001","state":"Abandoned"},"id":"evt_7","seq":"5","timestamp":"2026-11-30T09:12:03.512Z","type":"notification.failed"}"#
        )
    }

    @Test("the written JSON is JSONEncoder's to the byte: every field, and strings that need escaping")
    func jsonMatchesEncoder() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        }
        let controls = String(decoding: (0..<0x20).map { UInt8($0) } + [0x7F], as: UTF8.self)
        let errors = [
            nil, "", #"the hub said "no" \ try later"#, "a/b</script>", controls, "é ü 中文 🚀 \u{2028}\u{2029}",
            String(repeating: "x", count: 1000),
        ]
        var events: [Event] = []
        for (n, error) in errors.enumerated() {
            events.append(
                Event(
                    id: "evt_\(n)", seq: "\(n * 7)", type: EventType.allCases[n % EventType.allCases.count],
                    timestamp: Date(timeIntervalSince1970: 1_796_029_923.0 + Double(n) * 0.0137),
                    data: EventData(
                        notificationId: n % 2 == 0 ? UUID() : nil, hubSendId: n % 3 == 0 ? Int64(n) << 40 : nil,
                        campaignId: n % 2 == 1 ? Int64(n) : nil, campaignRunId: n % 2 == 1 ? -Int64(n) : nil,
                        deviceId: n % 4 == 0 ? DeviceID.random() : nil, state: n == 2 ? "Odd \"state\"" : "Enqueued",
                        error: error)))
        }
        events.append(
            Event(
                id: "evt_9", seq: "9", type: .deviceSyncFailed, timestamp: Date(timeIntervalSince1970: 0),
                data: EventData(
                    notificationId: UUID(), hubSendId: .max, campaignId: .min, campaignRunId: 0, deviceId: .random(),
                    state: "Failed", error: "all")))
        for event in events {
            let expected = String(decoding: try encoder.encode(event), as: UTF8.self)
            #expect(String(decoding: event.json(), as: UTF8.self) == expected)
        }
    }

    @Test("each final or hub-taken notification state makes its event; the waiting ones make none")
    func notificationTypes() {
        #expect(EventType.notification(.enqueued) == .notificationEnqueued)
        #expect(EventType.notification(.noTargetFound) == .notificationFailed)
        #expect(EventType.notification(.unknown) == .notificationFailed)
        #expect(EventType.notification(.expired) == .notificationExpired)
        #expect([NotificationState.scheduled, .queued, .processing].allSatisfy { EventType.notification($0) == nil })
    }
}

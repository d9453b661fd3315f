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
        let text = String(decoding: try event.json(), as: UTF8.self)
        #expect(
            text
                == #"{"data":{"notificationId":"0b7f0000-0000-4000-8000-000000000001","state":"Abandoned"},"id":"evt_7","seq":"5","timestamp":"2026-11-30T09:12:03.512Z","type":"notification.failed"}"#
        )
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

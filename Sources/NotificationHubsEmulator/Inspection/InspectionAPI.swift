import Foundation
import Hummingbird

/// The stable inspection and fault API under `/_emulator/` (see docs/nh-emulator.md). It needs no
/// authentication, is not subject to faults and does not appear in the request log.
extension EmulatorCore {
    static let jsonContentType = "application/json; charset=utf-8"

    private static func json(_ status: Int, _ body: String) -> HubResponse {
        HubResponse(status: status, headers: [(.contentType, jsonContentType)], body: body)
    }

    private static func jsonError(_ status: Int, _ message: String) -> HubResponse {
        var writer = JSONObjectWriter()
        writer.string("error", message)
        return json(status, writer.finished())
    }

    private static func array(_ items: [String]) -> String {
        "[" + items.joined(separator: ",") + "]"
    }

    func inspect(_ request: Request, segments: [String], now: Date) async -> HubResponse {
        let method = request.method.rawValue.uppercased()
        let lowered = segments.map { $0.lowercased() }
        let methodNotAllowed = Self.jsonError(405, "Method not allowed.")

        if lowered == ["health"] {
            return method == "GET" ? Self.json(200, #"{"status":"ok"}"#) : methodNotAllowed
        }
        if lowered == ["hubs"] {
            guard method == "GET" else { return methodNotAllowed }
            return Self.json(200, Self.array(hubList.map { hub in
                var writer = JSONObjectWriter()
                writer.string("name", hub.name)
                writer.stringArray("rules", hub.rules.map(\.name))
                return writer.finished()
            }))
        }
        guard lowered.count >= 3, lowered[0] == "hubs" else {
            return Self.jsonError(404, "Unknown inspection endpoint.")
        }
        guard let hub = hub(named: segments[1]) else {
            return Self.jsonError(404, "No hub named '\(segments[1])'.")
        }
        fireDueScheduledSends(hub, now: now)
        let query = QueryItems(request.uri.query)

        switch (Array(lowered.dropFirst(2)), method) {
        case (["deliveries"], "GET"):
            var deliveries = hub.deliveries()
            if let id = query.value("notificationId") { deliveries = deliveries.filter { $0.notificationId == id } }
            if let id = query.value("registrationId") { deliveries = deliveries.filter { $0.registrationId == id } }
            if let id = query.value("installationId") { deliveries = deliveries.filter { $0.installationId == id } }
            if let platform = query.value("platform") { deliveries = deliveries.filter { $0.platform == platform.lowercased() } }
            return Self.json(200, Self.array(deliveries.map(\.json)))
        case (["deliveries"], "DELETE"):
            hub.clearDeliveries()
            return HubResponse(status: 204)
        case (["registrations"], "GET"):
            return Self.json(200, Self.array(hub.allRegistrations(now: now).map(Self.registrationJSON)))
        case (let path, "POST") where path.count == 3 && path[0] == "registrations" && path[2] == "expire":
            let id = segments[3]
            return hub.expireRegistration(id: id) ? HubResponse(status: 204) : Self.jsonError(404, "No registration '\(id)'.")
        case (["faults"], "GET"):
            return Self.json(200, Self.array(hub.faults.rules.map(\.json)))
        case (["faults"], "POST"):
            return await addFaults(request, hub: hub, query: query)
        case (["faults"], "DELETE"):
            hub.faults.clear()
            return HubResponse(status: 204)
        case (["handles"], "GET"):
            let marks = hub.handleOutcomes().sorted { $0.key < $1.key }.map { handle, outcome in
                var writer = JSONObjectWriter()
                writer.string("handle", handle)
                writer.string("outcome", outcome)
                return writer.finished()
            }
            return Self.json(200, Self.array(marks))
        case (["handles"], "POST"):
            return await markHandles(request, hub: hub)
        case (["requests"], "GET"):
            return Self.json(200, Self.array(hub.requests().map(\.json)))
        case (["requests"], "DELETE"):
            hub.clearRequests()
            return HubResponse(status: 204)
        case (["deliveries"], _), (["registrations"], _), (["faults"], _), (["requests"], _), (["handles"], _):
            return methodNotAllowed
        default:
            return Self.jsonError(404, "Unknown inspection endpoint.")
        }
    }

    /// `{"handle": "…", "outcome": "ExpiredChannel"}` (or an array of them): sends reaching the
    /// handle count that telemetry outcome instead of `Success`; `"Success"` clears the mark.
    private func markHandles(_ request: Request, hub: HubState) async -> HubResponse {
        struct Mark: Decodable {
            var handle: String
            var outcome: String
        }
        let body: Data
        do {
            var buffer = try await request.body.collect(upTo: 1 << 20)
            body = Data(buffer.readBytes(length: buffer.readableBytes) ?? [])
        } catch {
            return Self.jsonError(413, "The handle marks are too large.")
        }
        let marks: [Mark]
        if let list = try? JSONDecoder().decode([Mark].self, from: body) {
            marks = list
        } else if let single = try? JSONDecoder().decode(Mark.self, from: body) {
            marks = [single]
        } else {
            return Self.jsonError(400, #"The body must be {"handle": "…", "outcome": "…"} or an array of them."#)
        }
        var canonical: [(String, String)] = []
        for mark in marks {
            guard !mark.handle.isEmpty else { return Self.jsonError(400, "handle must not be empty.") }
            guard let outcome = TelemetryOutcome.canonical(mark.outcome) else {
                return Self.jsonError(
                    400, "'\(mark.outcome)' is not a telemetry outcome (\(TelemetryOutcome.names.sorted().joined(separator: ", "))).")
            }
            canonical.append((mark.handle, outcome))
        }
        for (handle, outcome) in canonical { hub.setHandleOutcome(handle, outcome: outcome) }
        return HubResponse(status: 204)
    }

    private func addFaults(_ request: Request, hub: HubState, query: QueryItems) async -> HubResponse {
        var seed: UInt64?
        if let text = query.value("seed") {
            guard let value = UInt64(text) ?? Int64(text).map({ UInt64(bitPattern: $0) }) else {
                return Self.jsonError(400, "seed must be an integer.")
            }
            seed = value
        }
        let body: Data
        do {
            var buffer = try await request.body.collect(upTo: 1 << 20)
            body = Data(buffer.readBytes(length: buffer.readableBytes) ?? [])
        } catch {
            return Self.jsonError(413, "The fault rules are too large.")
        }
        let inputs: [FaultRule.Input]
        if let list = try? JSONDecoder().decode([FaultRule.Input].self, from: body) {
            inputs = list
        } else if let single = try? JSONDecoder().decode(FaultRule.Input.self, from: body) {
            inputs = [single]
        } else {
            return Self.jsonError(400, "The body must be a JSON array of fault rules.")
        }
        var rules: [FaultRule] = []
        for input in inputs {
            do {
                rules.append(try FaultRule(input))
            } catch {
                return Self.jsonError(400, error.detail)
            }
        }
        hub.faults.add(rules, seed: seed)
        return Self.json(200, Self.array(hub.faults.rules.map(\.json)))
    }

    static func registrationJSON(_ registration: Registration) -> String {
        var writer = JSONObjectWriter()
        writer.string("registrationId", registration.id)
        writer.string("installationId", registration.installationId)
        writer.string("platform", registration.platform.installationName)
        writer.string("pnsHandle", registration.handle)
        writer.stringArray("tags", registration.tags)
        writer.string("templateName", registration.template?.name)
        writer.string("templateBody", registration.template?.body)
        writer.string("expirationTime", registration.expiration.map(EmulatorDates.iso8601Milliseconds) ?? "9999-12-31T23:59:59.999Z")
        writer.int("etag", registration.etag)
        return writer.finished()
    }
}

import AsyncHTTPClient
import HeraldDelivery
import Testing

@Suite("The hub's HTTP client")
struct HubHTTPClientTests {
    @Test("no tracing span per request: Herald bootstraps no tracer, so a span would only cost")
    func noTracer() async throws {
        let client = DeliveryHandlers.makeHTTPClient(maxConnections: 4)
        #expect(client.tracer == nil)
        try await client.shutdown()
    }
}

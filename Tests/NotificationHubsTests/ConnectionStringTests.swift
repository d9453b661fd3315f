import Testing

@testable import NotificationHubs

@Suite("Connection strings")
struct ConnectionStringTests {
    @Test("sb:// becomes https://, the key keeps its trailing '='")
    func azureForm() throws {
        let parsed = try NotificationHubConnectionString(
            "Endpoint=sb://contoso.servicebus.windows.net/;SharedAccessKeyName=DefaultFullSharedAccessSignature;SharedAccessKey=abc+/def=="
        )
        #expect(parsed.serviceURL == "https://contoso.servicebus.windows.net/")
        #expect(parsed.endpoint == "sb://contoso.servicebus.windows.net/")
        #expect(parsed.sharedAccessKeyName == "DefaultFullSharedAccessSignature")
        #expect(parsed.sharedAccessKey == "abc+/def==")
        #expect(parsed.entityPath == nil)
    }

    @Test("http:// and https:// are used as written; a trailing slash is added")
    func httpForms() throws {
        let http = try NotificationHubConnectionString(
            "Endpoint=http://127.0.0.1:8080;SharedAccessKeyName=r;SharedAccessKey=k")
        #expect(http.serviceURL == "http://127.0.0.1:8080/")
        let https = try NotificationHubConnectionString(
            "Endpoint=https://localhost:9443/;SharedAccessKeyName=r;SharedAccessKey=k")
        #expect(https.serviceURL == "https://localhost:9443/")
    }

    @Test("Key names are case-insensitive, whitespace trimmed, empty parts and unknown keys skipped")
    func tolerant() throws {
        let parsed = try NotificationHubConnectionString(
            " endpoint = sb://ns.servicebus.windows.net/ ;; sharedaccesskeyname=rule;SHAREDACCESSKEY= k== ;EntityPath=hub;OperationTimeout=00:01:00;"
        )
        #expect(parsed.serviceURL == "https://ns.servicebus.windows.net/")
        #expect(parsed.sharedAccessKeyName == "rule")
        #expect(parsed.sharedAccessKey == "k==")
        #expect(parsed.entityPath == "hub")
    }

    @Test(
        "Missing parts and bad schemes are rejected",
        arguments: [
            "SharedAccessKeyName=r;SharedAccessKey=k",
            "Endpoint=sb://ns/;SharedAccessKey=k",
            "Endpoint=sb://ns/;SharedAccessKeyName=r",
            "Endpoint=sb://ns/;SharedAccessKeyName=r;SharedAccessKey=",
            "Endpoint=ftp://ns/;SharedAccessKeyName=r;SharedAccessKey=k",
            "Endpoint=https://;SharedAccessKeyName=r;SharedAccessKey=k",
            "garbage",
        ])
    func invalid(_ text: String) {
        #expect {
            try NotificationHubConnectionString(text)
        } throws: { error in
            (error as? NotificationHubsError)?.code == .invalidConnectionString
        }
    }

    @Test("description hides the key")
    func redacted() throws {
        let parsed = try NotificationHubConnectionString(
            "Endpoint=sb://ns/;SharedAccessKeyName=r;SharedAccessKey=SECRETKEY=")
        #expect(!parsed.description.contains("SECRETKEY"))
        #expect(parsed.description.contains("<redacted>"))
    }

    @Test("The client builds hub URLs from the endpoint and hub name")
    func urls() throws {
        let client = try NotificationHubClient(
            connectionString: "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=r;SharedAccessKey=k",
            hubName: "my hub")
        #expect(client.hubURL == "https://ns.servicebus.windows.net/my%20hub")
        #expect(client.core.messagesURL == "https://ns.servicebus.windows.net/my%20hub/messages?api-version=2020-06")
        #expect(client.core.directURL.hasSuffix("/messages?api-version=2020-06&direct"))
        #expect(client.core.batchURL.hasSuffix("/messages/$batch?api-version=2020-06&direct"))
        #expect(client.core.url("registrations", query: "$top=2").hasSuffix("/registrations?api-version=2020-06&$top=2"))
    }

    @Test("An empty hub name is refused")
    func emptyHub() {
        #expect(throws: NotificationHubsError.self) {
            try NotificationHubClient(
                connectionString: "Endpoint=sb://ns/;SharedAccessKeyName=r;SharedAccessKey=k", hubName: "")
        }
    }
}

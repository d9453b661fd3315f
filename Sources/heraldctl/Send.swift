import ArgumentParser
import Dispatch
import Foundation
import HeraldDomain
import HeraldRuntime
import Synchronization

/// `heraldctl send`: one notification to every user of a file, through a running `herald-api`.
struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a notification to every user of a file through herald-api, with progress. Safe to run again.",
        discussion: """
            The users file has one user name per line, or is CSV (a .csv name or a comma in the first line) with a \
            "user" column whose other columns are per-user template parameters. Blank lines and lines starting \
            with # are skipped. Lines that fail the checks go to the rejects file (line, reason, text) and do not \
            stop the rest.

            Every line gets an idempotency key derived from the content, the options, --run-name and the line, \
            so running the same command again (after Ctrl-C, a crash or a network cut) sends nothing twice and \
            finishes what is missing. Run it again with the same API key: keys belong to the key that used them.

            --telemetry / --no-telemetry ask for the hub's per-message telemetry or not; without either, \
            --wait asks for it (it reports the PNS outcomes) and a send without --wait takes the API's default \
            (off for users: their hub sends end Enqueued, one hub call each). --wait counts a notification \
            without telemetry as done once it is Enqueued (the hub accepted it). The choice is not part of the \
            idempotency keys: a rerun with another choice sends nothing again.

            The API key is read from HERALD_API_KEY (send scope; --wait also needs read).

            Exit status: 0 all sent; 1 stopped (rerun to finish); 3 sent, but some lines were rejected; \
            4 --wait gave up before every notification was final.
            """
    )

    @Option(name: .customLong("users-file"), help: "The users: one name a line, or CSV with a \"user\" column.")
    var usersFile: String

    @Option(help: "How to read the users file: auto, lines or csv.")
    var format: String = "auto"

    @Option(help: "herald-api's address (default: HERALD_API_URL, else http://127.0.0.1:8080).")
    var api: String?

    @Option(help: "The tutorial's alert \"From <from>: TEXT\", built for APNs, FCM v1 and WNS as the tutorial send does.")
    var message: String?

    @Option(help: "The sender named in --message's alert.")
    var from: String = "Herald"

    @Option(help: "Native APNs payload (JSON object).")
    var apple: String?

    @Option(help: "Native FCM v1 payload (JSON object with a \"message\" object).")
    var fcmv1: String?

    @Option(help: "Native WNS payload (XML).")
    var windows: String?

    @Option(name: .customLong("template-params"), help: "Template parameters (JSON object); CSV columns override them per user.")
    var templateParams: String?

    @Option(help: "Seconds after the send time by which the hub must have taken it (1 to 86400; default 1800).")
    var ttl: Int?

    @Option(name: .customLong("send-at"), help: "When to send, ISO 8601 (e.g. 2026-11-23T10:00:00Z); at most 7 days ahead.")
    var sendAt: String?

    @Option(help: "APNs priority: high or normal.")
    var priority: String?

    @Option(name: .customLong("collapse-id"), help: "APNs collapse id (1 to 64 bytes).")
    var collapseId: String?

    @Option(name: .customLong("apns-push-type"), help: "APNs push type (alert, background, …).")
    var apnsPushType: String?

    @Option(help: "Where rejected lines go (default: the users file's path + .rejects).")
    var rejects: String?

    @Option(
        name: .customLong("run-name"), help: "Mixed into every idempotency key: a new name sends the same file and content again."
    )
    var runName: String = ""

    @Option(help: "Batches in flight at once (1 to 16).")
    var concurrency: Int = 4

    @Option(name: .customLong("batch-size"), help: "Notifications per request (1 to 1000).")
    var batchSize: Int = 1000

    @Flag(help: "Follow the notifications until they are final and print the outcomes (needs the read scope).")
    var wait = false

    @Flag(
        inversion: .prefixedNo,
        help: "Poll the hub's telemetry for every notification, or not (default: with --wait yes, else the API's default).")
    var telemetry: Bool?

    @Option(name: .customLong("wait-timeout"), help: "Seconds --wait follows before giving up (exit 4).")
    var waitTimeout: Int = 3600

    @Option(name: .customLong("progress-interval"), help: "Seconds between progress lines when standard error is not a terminal.")
    var progressInterval: Double = 5

    func run() async throws {
        let status: Int32
        do {
            status = try await SendRun(self).run()
        } catch {
            HeraldExit.fail("heraldctl", error)
        }
        if status != 0 { throw ExitCode(status) }
    }

    /// The `telemetry` every notification asks for: the flag, else true with `--wait` (so it can
    /// report the PNS outcomes), else nil (the API's default for the target).
    var requestedTelemetry: Bool? { telemetry ?? (wait ? true : nil) }

    func validate() throws {
        guard (1...16).contains(concurrency) else { throw ValidationError("--concurrency is 1 to 16") }
        guard (1...1000).contains(batchSize) else { throw ValidationError("--batch-size is 1 to 1000") }
        guard UsersFileFormat(rawValue: format) != nil else { throw ValidationError("--format is auto, lines or csv") }
        guard progressInterval > 0 else { throw ValidationError("--progress-interval must be positive") }
        guard waitTimeout > 0 else { throw ValidationError("--wait-timeout must be positive") }
        if message != nil && (apple != nil || fcmv1 != nil || windows != nil) {
            throw ValidationError("--message builds the native payloads itself: give it, or --apple/--fcmv1/--windows")
        }
    }
}

/// One run of `heraldctl send`: read and check, send in batches, summarise, follow.
struct SendRun: Sendable {
    let options: Send
    let apiKey: String
    let apiURL: String
    let rejectsPath: String

    init(_ options: Send) throws {
        self.options = options
        let environment = ProcessInfo.processInfo.environment
        guard let key = environment["HERALD_API_KEY"]?.trimmingCharacters(in: .whitespacesAndNewlines), !key.isEmpty
        else {
            throw CommandFailure(
                "HERALD_API_KEY is not set: make a key with `heraldctl keys create --name NAME --scopes send,read`")
        }
        apiKey = key
        apiURL = options.api ?? environment["HERALD_API_URL"] ?? "http://127.0.0.1:8080"
        rejectsPath = options.rejects ?? options.usersFile + ".rejects"
    }

    /// Runs and returns the exit status.
    func run() async throws -> Int32 {
        let file = try UsersFile.read(path: options.usersFile, format: UsersFileFormat(rawValue: options.format) ?? .auto)
        let request = try makeRequest(hasParameterColumns: !file.parameterColumns.isEmpty)
        var rejected = file.rejected
        var recipients: [Recipient] = []
        recipients.reserveCapacity(file.recipients.count)
        for recipient in file.recipients {
            if let problem = request.check(recipient) {
                rejected.append(RejectedLine(line: recipient.line, reason: problem, text: recipient.user))
            } else {
                recipients.append(recipient)
            }
        }
        let rejectsFile = RejectsFile(path: rejectsPath, usersFile: options.usersFile)
        try rejectsFile.clear()
        // Written now, so they are there even if the run is stopped; rewritten at the end.
        try rejectsFile.write(rejected)

        let client = SenderAPIClient(baseURL: apiURL, apiKey: apiKey, connections: options.concurrency)
        do {
            let status = try await send(recipients, request: request, rejected: rejected, client: client)
            await client.shutdown()
            return status
        } catch {
            await client.shutdown()
            throw error
        }
    }

    /// Sends to `recipients` (after the local checks) and follows them with `--wait`.
    func send(
        _ recipients: [Recipient], request: SendRequest, rejected localRejects: [RejectedLine], client: SenderAPIClient
    ) async throws -> Int32 {
        var rejected = localRejects
        let rejectsFile = RejectsFile(path: rejectsPath, usersFile: options.usersFile)
        let progress = SendProgress(
            label: "sending", total: recipients.count, interval: .milliseconds(Int(options.progressInterval * 1000)))
        let sender = BatchSender(
            client: client, request: request, keys: SendKeys(shared: request.sharedText, runName: options.runName),
            recipients: recipients, batchSize: options.batchSize, concurrency: options.concurrency, progress: progress)
        let interruption = Interruption.install(progress: progress, sender: sender, total: recipients.count)
        defer { interruption.cancel() }

        if options.wait {
            // Before sending: a key without `read` would send and then be unable to follow.
            _ = try await SendFollower.checkReadable(client)
        }
        let ticker = Task { await progress.run() }
        let result: BatchSender.Result
        do {
            result = try await sender.send()
        } catch {
            ticker.cancel()
            progress.interrupt()
            let sent = sender.acceptedCount
            try? rejectsFile.write(rejected + sender.rejectedSoFar)
            throw CommandFailure(
                "\(error); \(sent) of \(recipients.count) accepted before it stopped: run the same command again to finish")
        }
        ticker.cancel()
        await ticker.value
        progress.finish()
        rejected += result.rejected
        try rejectsFile.write(rejected)

        printSummary(result: result, rejected: rejected.count, recipients: recipients.count)
        var status: Int32 = rejected.isEmpty ? 0 : 3
        if options.wait {
            let follower = SendFollower(client: client, progress: progress, timeout: .seconds(options.waitTimeout))
            let outcome = try await follower.follow(ids: result.ids)
            outcome.print()
            if !outcome.isFinal { status = 4 }
        }
        return status
    }

    /// The shared content and options, checked.
    func makeRequest(hasParameterColumns: Bool) throws -> SendRequest {
        var content = NotificationContent()
        if let message = options.message {
            guard !message.isEmpty else { throw CommandFailure("--message is empty") }
            do {
                content.apple = try TutorialMessage.payload(.apple, from: options.from, message)
                content.fcmv1 = try TutorialMessage.payload(.fcmv1, from: options.from, message)
                content.windows = try TutorialMessage.payload(.windows, from: options.from, message)
            } catch {
                throw CommandFailure("--message: \(error.message)")
            }
        }
        if let apple = options.apple { content.apple = try Self.jsonObject(apple, option: "--apple") }
        if let fcmv1 = options.fcmv1 {
            content.fcmv1 = try Self.jsonObject(fcmv1, option: "--fcmv1", requiring: "message")
        }
        if let windows = options.windows {
            guard !windows.isEmpty else { throw CommandFailure("--windows is empty") }
            content.windows = windows
        }
        if let text = options.templateParams {
            do {
                content.template = try JSONDecoder().decode([String: TemplateValue].self, from: Data(text.utf8))
                    .mapValues(\.text)
            } catch {
                throw CommandFailure("--template-params must be a JSON object of strings, numbers or booleans")
            }
        }
        var priority: NotificationPriority?
        if let text = options.priority {
            guard let value = NotificationPriority(rawValue: text) else { throw CommandFailure("--priority is high or normal") }
            priority = value
        }
        var sendAt: (String, Date)?
        if let text = options.sendAt {
            guard let date = ISO8601.date(text) else {
                throw CommandFailure("--send-at is an ISO 8601 date-time such as 2026-11-23T10:00:00Z")
            }
            sendAt = (text, date)
        }
        return try SendRequest(
            content: content, priority: priority, collapseId: options.collapseId, apnsPushType: options.apnsPushType,
            ttl: options.ttl, sendAt: sendAt, telemetry: options.requestedTelemetry, hasParameterColumns: hasParameterColumns)
    }

    /// `text` if it is a JSON object (with `key` when given), trimmed.
    static func jsonObject(_ text: String, option: String, requiring key: String? = nil) throws -> String {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard let object = try? JSONSerialization.jsonObject(with: Data(trimmed.utf8)) as? [String: Any] else {
            throw CommandFailure("\(option) must be a JSON object")
        }
        if let key, !(object[key] is [String: Any]) {
            throw CommandFailure("\(option) must contain a \"\(key)\" object")
        }
        return trimmed
    }

    func printSummary(result: BatchSender.Result, rejected: Int, recipients: Int) {
        var text = "sent \(options.usersFile): \(result.accepted) accepted"
        text += rejected > 0 ? ", \(rejected) rejected (see \(rejectsPath))" : ", none rejected"
        text += " in \(Self.seconds(result.elapsed))\n"
        for (state, count) in result.states.sorted(by: { $0.value > $1.value || ($0.value == $1.value && $0.key < $1.key) }) {
            text += "  \(state) \(count)\n"
        }
        FileHandle.standardOutput.write(Data(text.utf8))
    }

    static func seconds(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return String(format: "%.1fs", seconds)
    }
}

/// Ctrl-C (and SIGTERM) while sending: end the bar's line, say how far it got and how to
/// finish, exit 130. Nothing is lost: what was accepted is in the database, and a rerun
/// finishes the rest.
struct Interruption {
    private let sources: [any DispatchSourceSignal]

    static func install(progress: SendProgress, sender: BatchSender, total: Int) -> Interruption {
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                progress.interrupt()
                let text =
                    "heraldctl: interrupted: \(sender.acceptedCount) of \(total) accepted; "
                    + "run the same command again to finish (nothing is sent twice)\n"
                FileHandle.standardError.write(Data(text.utf8))
                exit(130)
            }
            source.resume()
            sources.append(source)
        }
        return Interruption(sources: sources)
    }

    func cancel() {
        for source in sources { source.cancel() }
    }
}

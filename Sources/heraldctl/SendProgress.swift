import Foundation
import Synchronization

/// The progress of `heraldctl send`, on standard error.
///
/// - On a terminal: one line redrawn in place (`\r`, then erase to the end of the line) at most
///   five times a second and only when its text changed, so it does not flicker:
///   `sending [##########----------] 5,000/10,000  50%  2,345/s  ETA 0:02`.
/// - Otherwise (a pipe, a log file): a plain line every ``interval``:
///   `heraldctl send: sending 5000/10000 (50%), 2345/s, ETA 2s`.
///
/// The rate is over the last five seconds, so a pause (a `Retry-After`) shows at once.
final class SendProgress: Sendable {
    private struct State {
        var label: String
        var total: Int
        var done = 0
        var samples: [(ContinuousClock.Instant, Int)] = []
        var lastText = ""
        var lastLine = ContinuousClock.now
        var drawn = false
    }

    /// Whether standard error is a terminal.
    let isTerminal: Bool
    /// How often a plain line is written when not on a terminal.
    let interval: Duration
    private let state: Mutex<State>

    init(label: String, total: Int, interval: Duration, isTerminal: Bool = isatty(STDERR_FILENO) == 1) {
        self.isTerminal = isTerminal
        self.interval = interval
        state = Mutex(State(label: label, total: total))
    }

    /// Starts a new phase (e.g. following after sending) with its own total.
    func restart(label: String, total: Int) {
        state.withLock { state in
            state = State(label: label, total: total, lastLine: .now)
        }
    }

    /// Sets how many are done.
    func set(done: Int) { state.withLock { $0.done = done } }

    /// Adds to how many are done.
    func add(_ count: Int) { state.withLock { $0.done += count } }

    /// Redraws until cancelled.
    func run() async {
        while !Task.isCancelled {
            tick()
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    /// Draws the last frame and ends its line.
    func finish() {
        tick(force: true)
        state.withLock { state in
            if isTerminal && state.drawn { Self.write("\n") }
            state.drawn = false
        }
    }

    /// Ends the bar's line (before another message is printed on a terminal).
    func interrupt() {
        state.withLock { state in
            if isTerminal && state.drawn { Self.write("\n") }
            state.drawn = false
        }
    }

    private func tick(force: Bool = false) {
        state.withLock { state in
            let now = ContinuousClock.now
            state.samples.append((now, state.done))
            state.samples.removeAll { now - $0.0 > .seconds(5) }
            let rate = Self.rate(state.samples)
            if isTerminal {
                let text = Self.bar(label: state.label, done: state.done, total: state.total, rate: rate)
                guard force || text != state.lastText else { return }
                state.lastText = text
                state.drawn = true
                Self.write("\r\u{1B}[K" + text)
            } else {
                guard force || now - state.lastLine >= interval else { return }
                state.lastLine = now
                Self.write(Self.line(label: state.label, done: state.done, total: state.total, rate: rate) + "\n")
            }
        }
    }

    /// Per second, from the oldest and newest samples.
    static func rate(_ samples: [(ContinuousClock.Instant, Int)]) -> Double? {
        guard let first = samples.first, let last = samples.last else { return nil }
        let elapsed = last.0 - first.0
        guard elapsed >= .milliseconds(500) else { return nil }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return Double(last.1 - first.1) / seconds
    }

    /// The terminal line.
    static func bar(label: String, done: Int, total: Int, rate: Double?) -> String {
        let width = 24
        let fraction = total == 0 ? 1 : min(1, Double(done) / Double(total))
        let filled = Int((fraction * Double(width)).rounded(.down))
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        var text = "\(label) [\(bar)] \(grouped(done))/\(grouped(total)) \(String(format: "%3d", Int(fraction * 100)))%"
        if let rate { text += "  \(grouped(Int(rate.rounded())))/s" }
        text += "  ETA " + eta(done: done, total: total, rate: rate, clock: true)
        return text
    }

    /// The plain line.
    static func line(label: String, done: Int, total: Int, rate: Double?) -> String {
        let percent = total == 0 ? 100 : Int(min(1, Double(done) / Double(total)) * 100)
        var text = "heraldctl send: \(label) \(done)/\(total) (\(percent)%)"
        if let rate { text += ", \(Int(rate.rounded()))/s" }
        return text + ", ETA " + eta(done: done, total: total, rate: rate, clock: false)
    }

    /// Time left at `rate`: `1:05` (or `65s`), `-` when unknown.
    static func eta(done: Int, total: Int, rate: Double?, clock: Bool) -> String {
        if done >= total { return clock ? "0:00" : "0s" }
        guard let rate, rate > 0 else { return "-" }
        let seconds = Int((Double(total - done) / rate).rounded(.up))
        guard clock else { return "\(seconds)s" }
        let (hours, rest) = seconds.quotientAndRemainder(dividingBy: 3600)
        let (minutes, secs) = rest.quotientAndRemainder(dividingBy: 60)
        return hours > 0
            ? String(format: "%d:%02d:%02d", hours, minutes, secs) : String(format: "%d:%02d", minutes, secs)
    }

    /// `12,345`.
    static func grouped(_ value: Int) -> String {
        let digits = Array(String(value))
        var out = ""
        for (index, digit) in digits.enumerated() {
            if index > 0 && (digits.count - index) % 3 == 0 { out.append(",") }
            out.append(digit)
        }
        return out
    }

    static func write(_ text: String) {
        try? FileHandle.standardError.write(contentsOf: Data(text.utf8))  // a closed pipe must not stop the work
    }
}

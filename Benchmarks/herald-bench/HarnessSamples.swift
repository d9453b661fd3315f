import Foundation
import Synchronization

/// Pickup latencies of the last `windowSeconds` seconds in bounded memory: one sparse
/// histogram per second of wall time, with logarithmic buckets 0.1% wide (three significant
/// figures), merged when a percentile is read.
final class LatencyWindow: Sendable {
    /// Bucket `i` holds values in [growth^i, growth^(i+1)) microseconds.
    static let growth = 1.001
    private static let logGrowth = log(growth)

    private struct Second {
        var epochSecond: Int
        var counts: [Int32: Int]
    }

    private let windowSeconds: Int
    private let seconds: Mutex<[Second]>

    init(windowSeconds: Int) {
        self.windowSeconds = max(1, windowSeconds)
        seconds = Mutex(Array(repeating: Second(epochSecond: -1, counts: [:]), count: max(1, windowSeconds)))
    }

    static func bucket(microseconds: Double) -> Int32 {
        Int32(clamping: Int((log(max(1, microseconds)) / logGrowth).rounded(.down)))
    }

    /// The bucket's midpoint in milliseconds.
    static func milliseconds(bucket: Int32) -> Double {
        pow(growth, Double(bucket) + 0.5) / 1000
    }

    func record(milliseconds: Double, at now: Date = Date()) {
        let second = Int(now.timeIntervalSince1970.rounded(.down))
        let bucket = Self.bucket(microseconds: milliseconds * 1000)
        let slot = second % windowSeconds
        seconds.withLock { ring in
            if ring[slot].epochSecond != second { ring[slot] = Second(epochSecond: second, counts: [:]) }
            ring[slot].counts[bucket, default: 0] += 1
        }
    }

    /// The percentiles (0...1) of the values recorded in the window ending at `now`, in
    /// milliseconds; nil when the window is empty.
    func percentiles(_ ps: [Double], at now: Date = Date()) -> [Double]? {
        let newest = Int(now.timeIntervalSince1970.rounded(.down))
        var merged: [Int32: Int] = [:]
        seconds.withLock { ring in
            for second in ring where second.epochSecond > newest - windowSeconds && second.epochSecond <= newest {
                merged.merge(second.counts, uniquingKeysWith: +)
            }
        }
        let total = merged.values.reduce(0, +)
        guard total > 0 else { return nil }
        let sorted = merged.sorted { $0.key < $1.key }
        return ps.map { p in
            let rank = max(1, Int((p * Double(total)).rounded(.up)))
            var seen = 0
            for (bucket, count) in sorted {
                seen += count
                if seen >= rank { return Self.milliseconds(bucket: bucket) }
            }
            return Self.milliseconds(bucket: sorted[sorted.count - 1].key)
        }
    }
}

/// Writes the adapter's JSON lines to standard output, one whole line per write.
struct JSONLines: Sendable {
    let system: String

    static func timestamp(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }

    static func encode(_ object: [String: any Sendable]) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// Ends the process when nothing reads the lines any more (the harness stopped; a broken
    /// pipe), rather than trapping in the write.
    func emit(_ object: [String: any Sendable]) {
        let line = Self.encode(object) + "\n"
        do {
            try FileHandle.standardOutput.write(contentsOf: Data(line.utf8))
        } catch {
            try? FileHandle.standardError.write(contentsOf: Data("herald-bench harness: standard output closed, stopping\n".utf8))
            exit(0)
        }
    }

    func sample(at time: Date, metric: String, value: Double, windowSeconds: Int) {
        emit([
            "t": Self.timestamp(time), "system": system, "kind": "adapter", "subject_kind": "adapter", "subject": "",
            "metric": metric, "value": value.isFinite ? (value * 1000).rounded() / 1000 : 0, "window_s": windowSeconds,
        ])
    }
}

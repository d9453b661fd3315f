/// An append-only log that keeps the newest `capacity` elements (a ring buffer).
struct BoundedLog<Element> {
    let capacity: Int
    private var storage: [Element] = []
    private var start = 0

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    var count: Int { storage.count }

    /// Appends; returns the element dropped to make room, if any.
    @discardableResult
    mutating func append(_ element: Element) -> Element? {
        if storage.count < capacity {
            storage.append(element)
            return nil
        }
        let evicted = storage[start]
        storage[start] = element
        start += 1
        if start == capacity { start = 0 }
        return evicted
    }

    /// Oldest first.
    var elements: [Element] {
        if start == 0 { return storage }
        return Array(storage[start...]) + Array(storage[..<start])
    }

    mutating func removeAll() {
        storage.removeAll()
        start = 0
    }
}

extension BoundedLog: Sendable where Element: Sendable {}

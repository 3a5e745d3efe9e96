import Foundation

/// The threads the async reads (`snapshots`, `count`, `aggregate`) block on, so that Swift's
/// cooperative pool never does: an async read hands its work here and suspends on a
/// continuation, and one of these threads runs the statements and resumes it.
///
/// One set serves the whole process. It starts threads as reads wait, up to `limit`; more
/// concurrent reads queue in arrival order. A store's reader pool (SQLite's read-only
/// connections, PostgreSQL's reader connections) gives each running read its own connection,
/// so reads never wait for the writer.
final class ReadThreads: @unchecked Sendable {
    // @unchecked: `jobs`, `head`, `idle` and `started` are touched only while `condition`'s
    // lock is held.
    static let shared = ReadThreads(limit: max(4, 2 * ProcessInfo.processInfo.activeProcessorCount))

    private let condition = NSCondition()
    private var jobs: [() -> Void] = []
    private var head = 0
    private var idle = 0
    private var started = 0
    /// How many threads it starts at most.
    let limit: Int

    init(limit: Int) {
        self.limit = limit
    }

    /// Runs `work` on one of the threads and returns what it returns.
    func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try work() }) }
        }
    }

    func submit(_ job: @escaping () -> Void) {
        condition.lock()
        jobs.append(job)
        let start = jobs.count - head > idle && started < limit
        if start { started += 1 }
        condition.signal()
        condition.unlock()
        if start {
            let thread = Thread { [self] in loop() }
            thread.name = "ContextStack.reads"
            thread.start()
        }
    }

    /// How many jobs the queue stores, finished or waiting (for tests).
    var storedJobs: Int {
        condition.lock()
        defer { condition.unlock() }
        return jobs.count
    }

    /// Whether the calling thread is one of these (`Thread.name` cannot tell on Linux, where
    /// a thread keeps the name of the one that started it).
    static var isCurrent: Bool { Thread.current.threadDictionary[marker] != nil }
    private static let marker = "ContextStack.reads"

    private func loop() {
        Thread.current.threadDictionary[Self.marker] = true
        while true {
            condition.lock()
            idle += 1
            while head == jobs.count { condition.wait() }
            idle -= 1
            let job = jobs[head]
            // Let go of the job here: while reads keep waiting, the queue is never empty, and
            // finished jobs (their closures, with what they read and the caller's
            // continuation) would pile up before `head`; and move the waiting ones to the
            // front once the finished ones are the larger part.
            jobs[head] = {}
            head += 1
            if head == jobs.count {
                jobs.removeAll(keepingCapacity: true)
                head = 0
            } else if head >= 64 && head * 2 >= jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job()
        }
    }
}

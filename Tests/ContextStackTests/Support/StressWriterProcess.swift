import Dispatch
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The `stress-writer` executable (Tests/StressWriter), built by SwiftPM beside the test bundle.
func stressWriter() throws -> URL {
    var directories: [URL] = []
    if let executable = Bundle.main.executableURL { directories.append(executable.deletingLastPathComponent()) }
    directories.append(URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent())
    // <package>/Tests/ContextStackTests/Support/this file → <package>/.build/debug
    var package = URL(fileURLWithPath: #filePath)
    for _ in 0..<4 { package.deleteLastPathComponent() }
    directories.append(package.appendingPathComponent(".build/debug"))
    for directory in directories {
        let candidate = directory.appendingPathComponent("stress-writer")
        if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
    }
    throw ChildProcessError(message: "stress-writer not found in \(directories.map(\.path)); `swift build` builds it")
}

/// A running `stress-writer`, its input, output and errors in pipes (a `ChildProcess`).
///
/// Every child is killed with SIGKILL after `timeLimit` seconds if it is still running, so a
/// test whose child hangs fails instead of hanging the suite.
final class StressWriterProcess: @unchecked Sendable {
    // @unchecked Sendable: `pending` is touched only by the thread that runs the test; the
    // watchdog uses nothing but `process`, which is Sendable.
    let process: ChildProcess
    /// Output read from the pipe but not yet returned as a line.
    private var pending = Data()

    /// Starts `stress-writer` with `arguments`; with `asUser`, as that user and group (through
    /// util-linux's `setpriv`), which only root may do.
    init(_ arguments: [String], asUser user: (uid: UInt32, gid: UInt32)? = nil, timeLimit: Double = 120) throws {
        let executable = try stressWriter()
        let command = user.map { ["/usr/bin/setpriv", "--reuid=\($0.uid)", "--regid=\($0.gid)", "--clear-groups", executable.path] } ?? [executable.path]
        let process = try ChildProcess(command + arguments, input: .pipe)
        self.process = process
        DispatchQueue.global().asyncAfter(deadline: .now() + timeLimit) {
            if process.isRunning { process.kill() }
        }
    }

    /// The next line the process writes, without its newline; `nil` once its output ends.
    func readLine() -> String? {
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                pending = Data(pending[(newline + 1)...])
                return line
            }
            let chunk = process.output?.availableData ?? Data()
            if chunk.isEmpty { return nil }
            pending.append(chunk)
        }
    }

    /// Reads lines until one equals `expected`; throws with the child's errors if its output
    /// ends first.
    func waitFor(_ expected: String) throws {
        while let line = readLine() {
            if line == expected { return }
        }
        throw ChildProcessError(message: "stress-writer ended before saying \"\(expected)\": \(errorText)")
    }

    /// Writes a line to the process's standard input; records an issue if the process is gone
    /// (the write fails with EPIPE: settings.c ignores SIGPIPE, which would end the whole run).
    func send(_ line: String) {
        do {
            try process.input?.write(contentsOf: Data((line + "\n").utf8))
        } catch {
            Issue.record("stress-writer is gone, it could not be sent \"\(line)\" (\(error)): \(errorText)")
        }
    }

    /// Kills the process with SIGKILL, waits for it, and returns every line it wrote that was
    /// not read yet.
    func killAndCollect() -> [String] {
        process.kill()
        process.waitUntilExit()
        return remainingLines()
    }

    /// Kills a `batches` writer while it commits: once it began a batch, after a random pause of
    /// up to `maximumPause` microseconds. Returns every line it wrote, for `WriterLog`.
    func killWhileCommitting(maximumPause: UInt32 = 25_000, using generator: inout some RandomNumberGenerator) -> [String] {
        var lines: [String] = []
        while let line = readLine() {
            lines.append(line)
            if line.hasPrefix("begin ") { break }
        }
        usleep(UInt32.random(in: 0...maximumPause, using: &generator))
        return lines + killAndCollect()
    }

    /// Every line the process wrote that was not read yet, once its output has ended.
    func remainingLines() -> [String] {
        var lines: [String] = []
        while let line = readLine() { lines.append(line) }
        return lines
    }

    var wasKilled: Bool { process.terminationSignal == SIGKILL }
    var exitedCleanly: Bool { process.exitCode == 0 }

    /// What the process wrote to its standard error.
    var errorText: String { String(decoding: process.errors?.readDataToEndOfFile() ?? Data(), as: UTF8.self) }
}

/// The entries a `stress-writer` commits per batch, in one commit.
let batchSize = 10

/// What a killed writer's lines say: the batches it saw committed, and whether the kill landed
/// while a commit was in flight (it said "begin N" and not yet "N").
struct WriterLog {
    var acknowledged = Set<Int>()
    var inFlight = false

    init(_ lines: [String]) {
        var begun: Int?
        for line in lines {
            if line.hasPrefix("begin "), let batch = Int(line.dropFirst(6)) {
                begun = batch
            } else if let batch = Int(line) {
                acknowledged.insert(batch)
            }
        }
        if let begun { inFlight = !acknowledged.contains(begun) }
    }
}

import Foundation

enum Machine {
    /// The CPU model, core count and memory, for the report.
    static func describe() -> String {
        let info = ProcessInfo.processInfo
        let cpu = (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?
            .split(separator: "\n")
            .first { $0.hasPrefix("model name") }?
            .split(separator: ":", maxSplits: 1).last?
            .trimmingCharacters(in: .whitespaces) ?? "unknown CPU"
        let memory = Double(info.physicalMemory) / 1_073_741_824
        return String(format: "%@, %d cores, %.0f GiB", cpu, info.activeProcessorCount, memory)
    }

    /// The resident set size of this process now, in bytes (Linux), or nil.
    static func residentBytes() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.split(separator: " ").compactMap { Int($0) }.first
            return digits.map { $0 * 1024 }
        }
        return nil
    }

    /// The peak resident set size of this process so far, in bytes (Linux), or nil.
    static func peakResidentBytes() -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let digits = line.split(separator: " ").compactMap { Int($0) }.first
            return digits.map { $0 * 1024 }
        }
        return nil
    }

    /// Hands the memory `malloc` holds free back to the system (`malloc_trim`), then resets the
    /// process's peak resident size to its current size (Linux: `clear_refs` 5) and returns
    /// that size in bytes. Without the trim, memory freed by earlier work stays resident, and
    /// a workload that reuses it shows no growth however much it allocates.
    static func resetPeak() -> Int {
        #if os(Linux)
        _ = mallocTrim(0)
        #endif
        try? "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        return residentBytes() ?? 0
    }
}

#if os(Linux)
/// glibc's `malloc_trim` (declared in `malloc.h`, which the Glibc module does not bring in).
@_silgen_name("malloc_trim")
private func mallocTrim(_ pad: Int) -> Int32
#endif

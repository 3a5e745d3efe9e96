/// Options of the string operators: `%"name"%.contains("onk", options: .caseInsensitive)`.
public struct MatchOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// Compare without regard to case (`[c]` in a format string).
    public static let caseInsensitive = MatchOptions(rawValue: 1)
    /// Compare without regard to diacritics: "é" matches "e" (`[d]` in a format string).
    public static let diacriticInsensitive = MatchOptions(rawValue: 2)

    /// `[c]`, `[d]`, `[cd]` or nothing.
    package var formatSuffix: String {
        switch (contains(.caseInsensitive), contains(.diacriticInsensitive)) {
        case (true, true): "[cd]"
        case (true, false): "[c]"
        case (false, true): "[d]"
        case (false, false): ""
        }
    }
}

/// The string operators.
package enum TextOperator: String, Sendable, CaseIterable {
    case like = "LIKE"
    case contains = "CONTAINS"
    case beginsWith = "BEGINSWITH"
    case endsWith = "ENDSWITH"
    case matches = "MATCHES"
}

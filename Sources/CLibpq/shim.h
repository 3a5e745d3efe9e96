#include <libpq-fe.h>
#include <locale.h>
#include <stdlib.h>
#if defined(__APPLE__)
#include <xlocale.h>
#else
// glibc declares strtod_l only under _GNU_SOURCE, which the Swift importer does not set.
extern double strtod_l(const char *__restrict text, char **__restrict end, locale_t locale);
#endif

// libpq names the fields of an error result with character constants (`PG_DIAG_SQLSTATE` is
// 'C'), which Swift does not import: one accessor per field we read.

/// The five-character SQLSTATE of an error result, or NULL.
static inline const char *cs_pq_sqlstate(const PGresult *result) {
    return PQresultErrorField(result, PG_DIAG_SQLSTATE);
}

/// The primary message of an error result, or NULL.
static inline const char *cs_pq_message(const PGresult *result) {
    return PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY);
}

/// The detail of an error result (which row, which key), or NULL.
static inline const char *cs_pq_detail(const PGresult *result) {
    return PQresultErrorField(result, PG_DIAG_MESSAGE_DETAIL);
}

/// The constraint an error result names, or NULL.
static inline const char *cs_pq_constraint(const PGresult *result) {
    return PQresultErrorField(result, PG_DIAG_CONSTRAINT_NAME);
}

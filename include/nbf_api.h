/*
 * nbf_api.h — ACC_API, the export macro of libnbfork's public headers
 * (nbfork.h, nbf_display.h, nbf_trainer.h), as NCCL's NCCL_API: the
 * library is compiled with -fvisibility=hidden and NBFORK_BUILDING, so
 * only the functions these headers declare with ACC_API are exported
 * (tests/runtime/check_exports.py holds it). For users it is empty.
 */
#ifndef NBF_API_H
#define NBF_API_H

#ifdef NBFORK_BUILDING
#define ACC_API __attribute__((visibility("default")))
#else
#define ACC_API
#endif

#endif

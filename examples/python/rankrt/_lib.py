# SPDX-License-Identifier: MIT
"""librankrt through ctypes (ABI mode): the prototypes and the public structs.

ctypes, not cffi: it ships with CPython (the project allows no dependency
beyond the standard library), needs no compiler at import, and a CDLL call
releases the GIL for its whole duration, which is what a blocking
rk_loop_run() needs. cffi's ABI mode would do the same with one more package.

Only what the binding uses is declared. The structs declared here are the
public ones a caller must lay out itself (a timer, a request, the backend's
ops table, the world's ops table, the wire views); their layout is part of
librankrt.so.2's ABI (librankrt.map: a layout change bumps the soname), so
loading the library by that soname is what makes these declarations right.
struct rk_config is never laid out here: it comes from rk_config_create() and
is set by knob name. The stats structs are read through the size-safe getters
with the counter names below (tests/python check them against the headers).
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char_p, c_float, c_int,
                    c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint16, c_uint32,
                    c_uint64, c_void_p)

SONAME = "librankrt.so.2"

RK_IDLE = 0
RK_BUSY = 1
RK_RUN_DEFAULT = 0
RK_RUN_ONCE = 1
RK_RUN_NOWAIT = 2
RK_FRAME_USER = 6
RK_WIRE_USER_HDR_LEN = 8
RK_E_BASE = 4096
RK_ESTOPPED = RK_E_BASE + 23
RK_ETIMEOUT = RK_E_BASE + 22


class Timer(Structure):
    _fields_ = [("data", c_void_p), ("cb", c_void_p), ("loop", c_void_p),
                ("due", c_uint64), ("period", c_uint64), ("next", c_void_p),
                ("prev", c_void_p), ("active", c_bool)]


class WireHdr(Structure):
    _fields_ = [("magic", c_uint32), ("version", c_uint8), ("type", c_uint8),
                ("flags", c_uint16), ("src_rank", c_uint32), ("len", c_uint32),
                ("seq", c_uint64), ("payload_crc", c_uint32), ("hdr_crc", c_uint32)]


class WireUser(Structure):
    _fields_ = [("tag", c_uint32), ("len", c_uint32), ("data", c_void_p)]


class WireStream(Structure):
    _fields_ = [("stream_id", c_uint64), ("position", c_uint32), ("n_tokens", c_uint32),
                ("n_draft", c_uint32), ("top_k", c_uint32), ("temperature", c_float),
                ("top_p", c_float), ("seed", c_uint64)]


class WireRound(Structure):
    _fields_ = [("round_id", c_uint64), ("n_streams", c_uint32), ("n_tok_total", c_uint32),
                ("n_draft_total", c_uint32), ("streams", c_void_p), ("tokens", c_void_p)]


TIMER_CB = CFUNCTYPE(c_int, POINTER(Timer), c_uint64)
READY_CB = CFUNCTYPE(None, c_void_p, c_void_p)
FRAME_CB = CFUNCTYPE(c_int, c_void_p, c_int, c_void_p, c_void_p, c_void_p)
PEER_ERROR_CB = CFUNCTYPE(None, c_void_p, c_int, c_int, c_void_p)


class WorldOps(Structure):
    _fields_ = [("ready", READY_CB), ("frame", FRAME_CB), ("peer_error", PEER_ERROR_CB)]


# struct rk_source_ops and struct rk_source (rk_runtime.h, "event sources")
SRC_POLL_CB = CFUNCTYPE(c_int, c_void_p, c_uint64)
SRC_ARM_CB = CFUNCTYPE(c_int, c_void_p)
SRC_EXPECT_CB = CFUNCTYPE(c_uint64, c_void_p, c_uint64)
SRC_VERDICT_CB = CFUNCTYPE(None, c_void_p, c_int)
RK_VERDICT_EARLY = 1
RK_VERDICT_SPIN = 4


class SourceOps(Structure):
    _fields_ = [("name", c_char_p), ("poll", SRC_POLL_CB), ("arm", SRC_ARM_CB),
                ("expect", SRC_EXPECT_CB), ("verdict", SRC_VERDICT_CB)]


class Source(Structure):
    _fields_ = [("ops", c_void_p), ("data", c_void_p), ("next", c_void_p), ("loop", c_void_p)]


LAUNCH_CB = CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(WireRound), c_uint)
TOKEN_CB = CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint32, POINTER(c_uint32))
RETIRE_CB = CFUNCTYPE(None, c_void_p, c_uint64)
BFRAME_CB = CFUNCTYPE(c_int, c_void_p, c_int, POINTER(WireUser))
WAITING_CB = CFUNCTYPE(c_int, c_void_p, c_uint64)


class BackendOps(Structure):
    _fields_ = [("launch", LAUNCH_CB), ("token", TOKEN_CB), ("retire", RETIRE_CB),
                ("flags", c_uint), ("frame", BFRAME_CB), ("user_tag", c_uint32),
                ("user_tags", c_uint32), ("waiting_for", WAITING_CB)]


class SchedConfig(Structure):
    _fields_ = [("max_batch", c_uint32), ("draft_k", c_uint32), ("draft", c_void_p),
                ("draft_arg", c_void_p), ("trace", c_void_p), ("trace_arg", c_void_p),
                ("vocab", c_uint32), ("resident", c_int)]


REQUEST_CB = CFUNCTYPE(None, c_void_p, POINTER(c_uint32), c_uint32, c_bool, c_int)


class Request(Structure):
    _fields_ = [("prompt", POINTER(c_uint32)), ("prompt_len", c_uint32),
                ("max_tokens", c_uint32), ("stop_token", c_int64), ("top_k", c_uint32),
                ("temperature", c_float), ("top_p", c_float), ("seed", c_uint64),
                ("draft_k", c_int32), ("cb", REQUEST_CB), ("data", c_void_p),
                ("id", c_uint64), ("generated", c_uint32), ("err_field", c_char_p),
                ("hist", c_void_p), ("hist_len", c_size_t), ("hist_cap", c_size_t),
                ("fed", c_uint32), ("dk", c_uint32), ("n_in", c_uint32),
                ("n_draft", c_uint32), ("next", c_void_p), ("queued", c_bool),
                ("in_batch", c_bool), ("cancelled", c_bool)]


# Counter names of the stats structs, in order (every one uint64_t but link's credits_min).
LOOP_STATS = """iterations events busy_events spin_iters blocks wakeups posts eintr ns_spin
ns_blocked ns_run predict_waits predict_early predict_late predict_cut ns_oversleep
predict_margin_ns learn_waits learn_holds window_cuts spin_window_ns prewarms ns_spin_predict
ns_spin_window learn_woken predict_overslept learn_overdue learn_restarts""".split()
LINK_STATS = """tx_frames tx_bytes rx_frames rx_bytes tx_flushes heartbeats_tx heartbeats_rx
tx_queued_max tx_sends tx_inline tx_credit_msgs credit_stalls cq_polls cq_events rnr_errors
credits_min shm_bcast_frames shm_wakes shm_sleeps shm_ring_full tcp_rx_direct tcp_rx_ring
tcp_tx_direct tcp_tx_ring shm_tx_direct tcp_tx_commit shm_lane_rx""".split()
LINK_SIGNED = {"credits_min"}
WORLD_STATS = """accepted joined pending pending_max refused_magic refused_version
refused_frame refused_job refused_rank refused_auth refused_timeout refused_evicted
refused_closed refused_other log_suppressed shm_links shm_remote shm_fallback""".split()
SCHED_STATS = """rounds tokens drafted accepted streams_done ns_round_sum published
resident_fallbacks queued running shared_rounds off_loop_rounds round_decodes round_timeouts
progress_sent round_bound_ns""".split()

_P = c_void_p
_PROTOS = {
    "rk_strerror": (c_char_p, [c_int]),
    "rk_errname": (c_char_p, [c_int]),
    "rk_version": (c_char_p, [POINTER(c_int), POINTER(c_int)]),
    "rk_config_create": (c_int, [POINTER(_P)]),
    "rk_config_destroy": (None, [_P]),
    "rk_config_set": (c_int, [_P, c_char_p, c_char_p, c_char_p, c_size_t]),
    "rk_config_from_env": (c_int, [_P, c_char_p, c_size_t]),
    "rk_config_from_launcher_env": (c_int, [_P, c_char_p, c_size_t]),
    "rk_loop_create": (c_int, [_P, POINTER(_P)]),
    "rk_loop_destroy": (c_int, [_P]),
    "rk_loop_run": (c_int, [_P, c_int]),
    "rk_loop_stop": (None, [_P]),
    "rk_loop_wake": (None, [_P]),
    "rk_loop_now": (c_uint64, [_P]),
    "rk_loop_stats": (c_size_t, [_P, _P, c_size_t]),
    "rk_source_init": (None, [POINTER(Source), POINTER(SourceOps), _P]),
    "rk_loop_add_source": (c_int, [_P, POINTER(Source)]),
    "rk_loop_remove_source": (c_int, [_P, POINTER(Source)]),
    "rk_timer_init": (None, [POINTER(Timer), _P, _P]),
    "rk_timer_start": (c_int, [_P, POINTER(Timer), c_uint64, c_uint64]),
    "rk_timer_stop": (None, [POINTER(Timer)]),
    "rk_world_create": (c_int, [_P, POINTER(WorldOps), _P, POINTER(_P)]),
    "rk_world_wait_ready": (c_int, [_P]),
    "rk_world_send_user": (c_int, [_P, c_int, c_uint32, c_char_p, c_uint32]),
    "rk_world_recv_user": (c_int, [_P, c_uint32, _P, c_uint32, POINTER(c_int), POINTER(c_uint32),
                                   c_int64]),
    "rk_world_broadcast": (c_int, [_P, c_uint, c_uint, c_char_p, c_uint32]),
    "rk_world_link": (_P, [_P, c_int]),
    "rk_world_rank": (c_int, [_P]),
    "rk_world_size": (c_int, [_P]),
    "rk_world_port": (c_int, [_P]),
    "rk_world_failed": (c_int, [_P]),
    "rk_world_stats": (c_size_t, [_P, _P, c_size_t]),
    "rk_world_destroy": (c_int, [_P]),
    "rk_link_stats": (c_size_t, [_P, _P, c_size_t]),
    "rk_link_transport": (c_char_p, [_P]),
    "rk_link_up": (c_bool, [_P]),
    "rk_wire_encode_user": (c_int, [_P, c_size_t, c_uint32, c_char_p, c_uint32]),
    "rk_wire_decode_user": (c_int, [_P, c_size_t, POINTER(WireUser)]),
    "rk_wire_round_stream": (None, [POINTER(WireRound), c_uint32, POINTER(WireStream)]),
    "rk_sched_create": (c_int, [_P, POINTER(SchedConfig), POINTER(BackendOps), _P,
                                POINTER(_P)]),
    "rk_sched_submit": (c_int, [_P, POINTER(Request)]),
    "rk_sched_cancel": (c_int, [_P, POINTER(Request)]),
    "rk_sched_complete": (None, [_P, c_uint64, c_int]),
    "rk_sched_stop": (None, [_P]),
    "rk_sched_destroy": (c_int, [_P]),
    "rk_sched_busy": (c_bool, [_P]),
    "rk_sched_idle": (c_bool, [_P]),
    "rk_sched_stats": (c_size_t, [_P, _P, c_size_t]),
    "rk_request_init": (None, [POINTER(Request)]),
}


def load():
    """librankrt.so.2 by its soname, or the file RANKRT_LIB names (a build tree's
    .libs/librankrt.so.2)."""
    lib = ctypes.CDLL(os.environ.get("RANKRT_LIB") or SONAME)
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = load()


# the same library once more: its function objects carry no argtypes
_bare_lib = ctypes.CDLL(lib._name)


def bare(name):
    """@name without argtypes, returning int: for a call on a message's way
    (Broadcast's writer), where each declared argument costs a conversion
    object per call. Its caller passes what ctypes passes unconverted: a
    c_void_p for a pointer, bytes for a buffer, ints that fit a C int."""
    fn = getattr(_bare_lib, name)
    fn.restype = c_int
    return fn

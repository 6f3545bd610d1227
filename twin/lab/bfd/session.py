"""One BFD session's state machine and timers (RFC 5880 section 6.8), as a switch ASIC runs it:
the packet work and the timers here, the configuration and the routing protocols' interest in
bfdd. Pure: the data plane passes the time in and sends what `due_packet` and `receive` return."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from twin.lab.bfd.wire import ControlPacket, Diag, SessionConfig, State

# RFC 5880 6.8.3: while a session is not Up it sends at most once a second (FRR's slow start alike)
SLOW_TX_US = 1_000_000


@dataclass
class Session:
    config: SessionConfig
    state: State = State.DOWN
    diag: int = Diag.NONE
    remote: ControlPacket | None = None  # the peer's last packet
    polling: bool = False  # a Poll Sequence runs (our timers changed): P set until the peer's F
    answer_final: bool = False  # the next packet carries F (the peer polled)
    next_tx: float = 0.0
    detect_at: float | None = None  # the peer is declared down then, unless it is heard from
    rx_packets: int = 0
    tx_packets: int = 0
    advertised_tx_us: int = SLOW_TX_US
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        if self.config.shutdown:
            self.state, self.diag = State.ADMIN_DOWN, Diag.ADMIN_DOWN

    # -- what we send -------------------------------------------------------------------------
    def _desired_tx_us(self) -> int:
        return self.config.min_tx_us if self.state == State.UP else max(self.config.min_tx_us, SLOW_TX_US)

    def packet(self) -> ControlPacket:
        final, self.answer_final = self.answer_final, False
        return ControlPacket(state=self.state, diag=self.diag, detect_mult=self.config.detect_mult,
                             my_discr=self.config.lid, your_discr=self.remote.my_discr if self.remote else 0,
                             desired_min_tx_us=self.advertised_tx_us, required_min_rx_us=self.config.min_rx_us,
                             poll=self.polling and not final, final=final)

    def _interval_s(self) -> float:
        """RFC 5880 6.8.7: the larger of our desired TX and the peer's required RX, less 0-25 %
        jitter (10-25 % with a multiplier of 1)."""
        remote_rx = self.remote.required_min_rx_us if self.remote else 0
        base = max(self.advertised_tx_us, remote_rx) / 1e6
        return base * self.rng.uniform(0.75, 0.9 if self.config.detect_mult == 1 else 1.0)

    def silent(self) -> bool:
        """Sends nothing: the peer asked for no packets (required RX 0), or a passive session that
        has not heard from its peer yet."""
        if self.remote is not None and self.remote.required_min_rx_us == 0:
            return True
        return self.config.passive and self.remote is None

    def due_packet(self, now: float) -> bytes | None:
        """The periodic packet, when one is due now (and the next one scheduled)."""
        if now < self.next_tx:
            return None
        self.next_tx = now + self._interval_s()
        if self.silent():
            return None
        self.tx_packets += 1
        return self.packet().pack()

    def send_now(self, now: float) -> bytes | None:
        """A packet out of turn (a state change, a Final): the periodic one keeps its time."""
        if self.silent() and not self.answer_final:
            return None
        self.tx_packets += 1
        return self.packet().pack()

    # -- what we hear -------------------------------------------------------------------------
    def detection_time_s(self) -> float:
        """RFC 5880 6.8.4, asynchronous mode: the peer's multiplier times the larger of our
        required RX and its desired TX."""
        assert self.remote is not None
        return self.remote.detect_mult * max(self.config.min_rx_us, self.remote.desired_min_tx_us) / 1e6

    def receive(self, packet: ControlPacket, now: float) -> tuple[bool, bool]:
        """RFC 5880 6.8.6 for a packet that passed the checks of wire.parse_control and matched this
        session. Returns (state changed, send a packet at once)."""
        self.rx_packets += 1
        self.remote = packet
        if packet.final and self.polling:
            self.polling = False
        if packet.poll:
            self.answer_final = True
        if self.state == State.ADMIN_DOWN:
            return False, self.answer_final
        self.detect_at = now + self.detection_time_s()
        before = self.state
        if packet.state == State.ADMIN_DOWN:
            if self.state != State.DOWN:
                self._go(State.DOWN, Diag.NEIGHBOR_DOWN, now)
        elif self.state == State.DOWN:
            if packet.state == State.DOWN:
                self._go(State.INIT, self.diag, now)  # the reason it went down stands until Up
            elif packet.state == State.INIT:
                self._go(State.UP, Diag.NONE, now)
        elif self.state == State.INIT:
            if packet.state in (State.INIT, State.UP):
                self._go(State.UP, Diag.NONE, now)
        elif packet.state == State.DOWN:  # we are Up
            self._go(State.DOWN, Diag.NEIGHBOR_DOWN, now)
        changed = self.state != before
        return changed, changed or self.answer_final

    def expire(self, now: float) -> bool:
        """RFC 5880 6.8.4: nothing heard for the detection time takes an Init or Up session Down.
        Returns whether it did."""
        if self.detect_at is None or now < self.detect_at:
            return False
        self.detect_at = None
        self.remote = None  # bfd.RemoteDiscr back to zero
        self.polling = False
        if self.state in (State.INIT, State.UP):
            self._go(State.DOWN, Diag.CONTROL_EXPIRED, now)
            return True
        return False

    def _go(self, state: State, diag: int, now: float) -> None:
        self.state, self.diag = state, diag
        # 6.8.3: the desired TX leaves its one-second floor on Up and returns to it on leaving Up;
        # either change is announced with a Poll Sequence
        desired = self._desired_tx_us()
        if desired != self.advertised_tx_us:
            self.advertised_tx_us = desired
            self.polling = self.state == State.UP
            # the peer times us by what we advertise from its next packet on: keep to it
            self.next_tx = min(self.next_tx, now + self._interval_s())

    # -- what bfdd changes ----------------------------------------------------------------------
    def reconfigure(self, config: SessionConfig) -> bool:
        """bfdd sent the session again (timers, shutdown). Returns whether the state changed."""
        old, self.config = self.config, config
        if config.shutdown and self.state != State.ADMIN_DOWN:
            self.state, self.diag, self.detect_at = State.ADMIN_DOWN, Diag.ADMIN_DOWN, None
            return True
        if not config.shutdown and self.state == State.ADMIN_DOWN:
            self.state, self.diag = State.DOWN, Diag.NONE
            return True
        if (old.min_tx_us, old.min_rx_us, old.detect_mult) != (config.min_tx_us, config.min_rx_us, config.detect_mult):
            self.advertised_tx_us = self._desired_tx_us()
            self.polling = self.state == State.UP
        return False

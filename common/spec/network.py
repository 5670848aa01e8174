"""Network conditions between the load generator and the server: a named profile or custom figures.

The follower shapes the link between its generator and the server's network namespace with `tc netem` (delay,
jitter, loss) and `tbf` (rate) on both ends of the veth pair, so each figure applies each way: a 50 ms delay adds
100 ms to a round trip (follower/host/netshape.py).

The profiles' figures and where they come from:

- `lan`: a switched gigabit Ethernet hop: 0.1 ms each way (0.2 ms round trip), 1,000 Mbit/s, no loss. Gigabit
  Ethernet's rate is IEEE 802.3ab's; the delay is a typical one-switch data-centre round trip, not a standard.
- `wifi`: an 802.11g link: 54 Mbit/s (IEEE 802.11g-2003's highest PHY rate), 5 ms each way with 2 ms of jitter and
  0.1% loss. The delay, jitter and loss are illustrative of a busy home or office access point, not a standard.
- `4g`: WebPageTest's "4G" connectivity profile (WPO-Foundation/webpagetest, www/settings/connectivity.ini.sample):
  9 Mbit/s, 170 ms round trip (85 ms each way), no loss.
- `custom`: the figures given, nothing else.

A figure given beside a named profile replaces that profile's figure (`{profile: 4g, loss_pct: 1}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from common.base import StrictModel

Profile = Literal["lan", "wifi", "4g", "custom"]

# profile -> (delay_ms each way, jitter_ms, loss_pct, rate_mbit); see the module docstring for the sources.
PROFILES: dict[str, tuple[float, float, float, float | None]] = {
    "lan": (0.1, 0.0, 0.0, 1000.0),
    "wifi": (5.0, 2.0, 0.1, 54.0),
    "4g": (85.0, 0.0, 0.0, 9.0),
    "custom": (0.0, 0.0, 0.0, None),
}


class NetworkSpec(StrictModel):
    """Network conditions between the load generator and the server, applied each way (tc netem and tbf on a veth
    pair), from a profile or custom figures; a figure given beside a profile replaces the profile's. `lan`: 0.1 ms each
    way, 1,000 Mbit/s (gigabit Ethernet, one switch); `wifi`: 5 ms ±2 each way, 0.1% loss, 54 Mbit/s (802.11g's top
    rate; the delay and loss are illustrative, not a standard); `4g`: WebPageTest's "4G" profile, 85 ms each way (a
    170 ms round trip), 9 Mbit/s. A follower needs the kernel's netem (delay, jitter, loss) and tbf (rate) qdiscs."""

    profile: Profile = "custom"
    """lan, wifi, 4g (WebPageTest's 4G: 9 Mbit/s, 170 ms round trip) or custom (only the figures given)."""
    delay_ms: Annotated[float, Field(ge=0, le=10_000)] | None = None
    """Added delay each way, in ms (a round trip grows by twice this)."""
    jitter_ms: Annotated[float, Field(ge=0, le=10_000)] | None = None
    """Random variation of the delay, in ms (netem's uniform jitter around delay_ms)."""
    loss_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    """Packets dropped at random each way, in percent (TCP retransmits them; the result counts the retransmissions)."""
    rate_mbit: Annotated[float, Field(gt=0, le=100_000)] | None = None
    """The link's rate each way, in Mbit/s (a token bucket); unset: not limited."""

    @model_validator(mode="after")
    def _jitter_within_delay(self) -> NetworkSpec:
        if self.effective_jitter_ms() > self.effective_delay_ms():
            raise ValueError("jitter_ms cannot exceed delay_ms (a packet cannot arrive before it was sent)")
        return self

    def effective_delay_ms(self) -> float:
        """The delay each way: the given figure, else the profile's."""
        return self.delay_ms if self.delay_ms is not None else PROFILES[self.profile][0]

    def effective_jitter_ms(self) -> float:
        """The jitter: the given figure, else the profile's."""
        return self.jitter_ms if self.jitter_ms is not None else PROFILES[self.profile][1]

    def effective_loss_pct(self) -> float:
        """The loss each way: the given figure, else the profile's."""
        return self.loss_pct if self.loss_pct is not None else PROFILES[self.profile][2]

    def effective_rate_mbit(self) -> float | None:
        """The rate each way (None: not limited): the given figure, else the profile's."""
        return self.rate_mbit if self.rate_mbit is not None else PROFILES[self.profile][3]

    def describe(self) -> str:
        """One line for tables and pages: `4g: 85 ms ±0 each way, 0% loss, 9 Mbit/s`."""
        rate = self.effective_rate_mbit()
        return (
            f"{self.profile}: {self.effective_delay_ms():g} ms ±{self.effective_jitter_ms():g} each way, "
            f"{self.effective_loss_pct():g}% loss, {'unlimited' if rate is None else f'{rate:g} Mbit/s'}"
        )


# Placement needs of a job with `network`, met by followers that can shape their servers' links: "@net:netem" (delay,
# jitter, loss: the kernel's netem qdisc) and "@net:tbf" (rate: a token bucket).
NETEM, TBF = "@net:netem", "@net:tbf"


def shaping_needs(network: Mapping[str, Any] | None) -> frozenset[str]:
    """The qdiscs a job's network conditions need (none without `network`)."""
    if network is None:
        return frozenset()
    spec = NetworkSpec.model_validate(network)
    needs = {NETEM} if (spec.effective_delay_ms(), spec.effective_jitter_ms(), spec.effective_loss_pct()) != (0, 0, 0) else set()
    return frozenset(needs | ({TBF} if spec.effective_rate_mbit() is not None else set()))

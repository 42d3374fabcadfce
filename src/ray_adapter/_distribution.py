"""A metadata-only ``ray`` distribution, served by the import hook to ``importlib.metadata``."""
import importlib.metadata as metadata

from ray_adapter import RAY_API_VERSION, __version__


class RayShimDistribution(metadata.Distribution):
    """``importlib.metadata.version("ray")`` answers the Ray API version the proxy mirrors."""

    _METADATA = (
        "Metadata-Version: 2.1\n"
        "Name: ray\n"
        f"Version: {RAY_API_VERSION}\n"
        f"Summary: Ray API served by ray-adapter {__version__} (not the Ray runtime)\n"
    )

    def read_text(self, filename):
        if filename in ("METADATA", "PKG-INFO"):
            return self._METADATA
        if filename == "top_level.txt":
            return "ray\n"
        return None

    def locate_file(self, path):
        import pathlib

        return pathlib.Path(__file__).parent / "ray" / path

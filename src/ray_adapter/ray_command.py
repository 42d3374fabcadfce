"""The ``ray`` console script ray-adapter installs: exactly what Ray's own is
(``ray.scripts.scripts:main``), so with ``RAY_BACKEND=yuanrong`` it is the adapter's ``ray``
command (``ray start --head``, ``ray stop``, ``ray status``, ``ray list``) and without it real
Ray's, when real Ray is installed (whichever of the two packages installed the script last).
Without either, it says so and exits 1."""
import sys


def main():
    try:
        from ray.scripts.scripts import main as ray_main
    except ModuleNotFoundError as exc:
        if exc.name not in ("ray", "ray.scripts", "ray.scripts.scripts"):
            raise
        sys.stderr.write("ray: Ray is not installed here, and RAY_BACKEND is not 'yuanrong' (only "
                         "then does ray-adapter serve the `ray` command). Set RAY_BACKEND=yuanrong "
                         "to use ray-adapter's.\n")
        return 1
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())

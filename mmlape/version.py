__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """Parse ``'0.1.0'`` into ``(0, 1, 0)``."""
    return tuple(int(x) for x in version_str.split('.') if x.isdigit())


version_info = parse_version_info(__version__)
